module github.com/bookstore-go/bookstore/tools/chaos

go 1.26.0
