module github.com/bookstore-go/bookstore/sql

go 1.26
