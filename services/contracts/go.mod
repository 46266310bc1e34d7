module github.com/bookstore-go/bookstore/services/contracts

go 1.26.0

require (
	github.com/bookstore-go/bookstore/services/platform v0.0.0
	github.com/google/uuid v1.6.0
	golang.org/x/net v0.62.0
	golang.org/x/text v0.44.0
)

require github.com/rabbitmq/amqp091-go v1.16.0 // indirect

replace github.com/bookstore-go/bookstore/services/platform => ../platform
