package experiments

import (
	"context"

	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Servers are the Postgres and RabbitMQ a sandbox is made on.
type Servers = sandbox.Servers

// NewSandbox makes a Lab of its own on servers: a fresh database and role, migrated as
// ordering's own would be, and a fresh virtual host, so the experiments touch neither the
// running system's ordering database nor its queues. close drops both.
func NewSandbox(ctx context.Context, servers Servers, tel *telemetry.Telemetry) (lab *Lab, close func(), err error) {
	box, err := sandbox.New(ctx, servers, "ordering_demo", orders.Migrations...)
	if err != nil {
		return nil, nil, err
	}
	return &Lab{Pool: box.Pool, AMQPURL: box.AMQPURL, Tel: tel}, box.Close, nil
}
