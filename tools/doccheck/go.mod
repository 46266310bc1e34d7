module github.com/bookstore-go/bookstore/tools/doccheck

go 1.26.0
