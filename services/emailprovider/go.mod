module github.com/bookstore-go/bookstore/services/emailprovider

go 1.26
