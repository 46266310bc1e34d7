module github.com/bookstore-go/bookstore/services/notification

go 1.26
