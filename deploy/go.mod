module github.com/bookstore-go/bookstore/deploy

go 1.26.0
