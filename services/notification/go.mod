module github.com/bookstore-go/bookstore/services/notification

go 1.26.0

replace (
	github.com/bookstore-go/bookstore/services/platform => ../platform
	github.com/bookstore-go/bookstore/sql => ../../sql
)

require (
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/text v0.44.0 // indirect
)
