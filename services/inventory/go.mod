module github.com/bookstore-go/bookstore/services/inventory

go 1.26
