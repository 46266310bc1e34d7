// Package experiments runs the producer-side experiments of `make demo` against the real
// Postgres and RabbitMQ, and returns what each one measured. The demo prints the results;
// the tests assert them. Nothing here is a constant: a line that says "events published:
// 0" drained the queue a moment before and found it empty.
//
// Each experiment places Ada's order for two copies of Dune and changes one thing: how
// the order's event leaves the service. Three of the ways are wrong designs, placed
// through wrongways.Orders, never through the real path: publish after the commit (the
// one ORDERING_PUBLISHER=direct runs), publish before it, and eShopOnContainers' event
// log with an inline publish and no sender. The fourth is the real one, ordering's own
// use case (orders.Service.PlaceOrder) and the outbox relay (package outbox), stopped in
// the one window it cannot close.
//
// A process cannot be killed in-process. Where the real process would die, a wrong
// design's hook returns an error and the experiment carries on as the restarted process
// would, with what the crash left in the database and the broker; the real relay is
// stopped at its own failpoint (contracts.RelayAfterPublish). The tests in cmd/ordering
// kill the real process in the same windows.
package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/ordering/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Dune is the book of every experiment's order.
var Dune = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")

// errSimulatedCrash stands for the process dying at a hook.
var errSimulatedCrash = errors.New("simulated crash")

// oneAtATime runs the experiments of a process one after the other: failpoints are the
// process's, and one experiment's would fire in another's order.
var oneAtATime sync.Mutex

// Lab is where the experiments run: a migrated ordering database of their own, and a
// RabbitMQ virtual host of their own, in which inventory's queue for OrderPlaced stands
// for every consumer.
type Lab struct {
	Pool    *pgxpool.Pool
	AMQPURL string
	Tel     *telemetry.Telemetry
}

// Result is one experiment's measurement, printed as one line.
type Result interface{ String() string }

// RunAll prints the pattern's header, then runs every experiment, from the dual write to
// the outbox's last window, and prints one line each.
func (l *Lab) RunAll(ctx context.Context, w io.Writer) error {
	fmt.Fprintln(w, header)
	steps := []func(context.Context) (Result, error){
		func(ctx context.Context) (Result, error) { return l.CommitThenPublish(ctx) },
		func(ctx context.Context) (Result, error) { return l.PublishThenCommit(ctx) },
		func(ctx context.Context) (Result, error) { return l.EventLogInlinePublish(ctx) },
		func(ctx context.Context) (Result, error) { return l.RelayCrashAfterConfirm(ctx) },
	}
	for _, step := range steps {
		r, err := step(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, r)
	}
	return nil
}

// adasOrder is the request of every experiment's order.
func adasOrder() orders.PlaceOrderRequest {
	return orders.PlaceOrderRequest{
		CustomerEmail: "ada@example.com",
		Lines:         []orders.PlaceOrderLine{{BookID: Dune.String(), Quantity: 2}},
	}
}

// placeOrder places Ada's order through a wrong way, its event sent by events.
func (l *Lab) placeOrder(ctx context.Context, events wrongways.Events) (orders.Answer, error) {
	return wrongways.NewOrders(l.service(), l.Pool, events, 1, l.Tel.Logger).PlaceOrder(ctx, "", adasOrder())
}

// service is ordering's use cases on the lab's database, writing OrderPlaced v1.
func (l *Lab) service() *orders.Service {
	return orders.NewService(l.Pool, l.Tel.Tracer("orders"), l.Tel.Logger, 1)
}

// reset gives the next experiment an empty database and an empty queue, declared as the
// deployment declares it.
func (l *Lab) reset(ctx context.Context) error {
	if _, err := l.Pool.Exec(ctx, "TRUNCATE orders, outbox, inbox CASCADE"); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	conn := broker.NewConn(l.AMQPURL, "ordering-experiments")
	defer conn.Close()
	ch, err := conn.Channel(ctx)
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	defer ch.Close()
	if err := contracts.InventoryTopology.Declare(ch, func() (*amqp.Channel, error) { return conn.Channel(ctx) }); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if _, err := ch.QueuePurge(contracts.QueueInventoryOrderPlaced, false); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

// newPublisher is a publisher with confirms to the broker at amqpURL, as ordering's is.
func newPublisher(amqpURL string) (*broker.Publisher, func()) {
	conn := broker.NewConn(amqpURL, "ordering-experiments-publish")
	pub := broker.NewPublisher(conn, contracts.Topology, 10*time.Second)
	return pub, func() { pub.Close(); _ = conn.Close() }
}

// copies takes every message off inventory's OrderPlaced queue: the events that were
// published, as a consumer would receive them, in the order they were published.
func (l *Lab) copies(ctx context.Context) ([]amqp.Delivery, error) {
	conn := broker.NewConn(l.AMQPURL, "ordering-experiments-read")
	defer conn.Close()
	ch, err := conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(contracts.QueueInventoryOrderPlaced, true)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", contracts.QueueInventoryOrderPlaced, err)
		}
		if !ok {
			return out, nil
		}
		out = append(out, d)
	}
}

// orderOf is the order id an OrderPlaced message announces: its envelope's subject.
func orderOf(d amqp.Delivery) (string, error) {
	var env event.Envelope
	if err := json.Unmarshal(d.Body, &env); err != nil {
		return "", fmt.Errorf("message %s: %w", d.MessageId, err)
	}
	return env.Subject, nil
}

// count runs a query that selects one integer.
func (l *Lab) count(ctx context.Context, query string, args ...any) (int, error) {
	var n int
	if err := l.Pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", query, err)
	}
	return n, nil
}
