module github.com/bookstore-go/bookstore/tools/chaos

go 1.26.0

replace (
	github.com/bookstore-go/bookstore/services/platform => ../../services/platform
	github.com/bookstore-go/bookstore/sql => ../../sql
)

require github.com/google/uuid v1.6.0
