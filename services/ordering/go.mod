module github.com/bookstore-go/bookstore/services/ordering

go 1.26
