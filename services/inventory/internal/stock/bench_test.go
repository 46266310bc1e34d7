package stock_test

import (
	"context"
	"encoding/json"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// BenchmarkConsumerAgainstBareAck measures, in one run on the same broker, how fast
// inventory's consumer (production concurrency and prefetch) takes OrderPlaced events
// off inventory.order-placed, each one an inbox claim, row locks, reservations and an
// outbox row in one transaction, and how fast a bare loop consumes and acks the same
// number of messages from a quorum queue of its own with the same prefetch and no
// database. inventory/bare is the price of exactly-once reservation.
func BenchmarkConsumerAgainstBareAck(b *testing.B) {
	const messages, concurrency = 2000, 4
	ctx := context.Background()
	pool := database(b, concurrency+4)
	amqpURL := testenv.VHost(b)
	// Enough copies that every order is reserved: the benchmark measures the full work.
	if _, err := pool.Exec(ctx, "UPDATE stock_levels SET on_hand = 1000000000"); err != nil {
		b.Fatal(err)
	}
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "inventory-bench", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := stock.NewService(pool, tel, stock.Options{})
	if err != nil {
		b.Fatal(err)
	}

	raw, err := testenv.DialAMQP(b, amqpURL)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := contracts.Topology.Declare(ch, raw.Channel); err != nil {
		b.Fatal(err)
	}
	const bare = "bench.bare"
	if _, err := ch.QueueDeclare(bare, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	books := []uuid.UUID{dune, neuromancer, hyperion}

	var inventoryTime, bareTime time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		fill(b, ch, contracts.Exchange, contracts.OrderPlaced, messages, books)
		fill(b, ch, "", bare, messages, books)
		b.StartTimer()

		var handled atomic.Int64
		done := make(chan struct{})
		counting := func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
			o, err := svc.HandleOrderEvent(ctx, env)
			if err == nil && handled.Add(1) == messages {
				close(done)
			}
			return o, err
		}
		countingBatch := func(ctx context.Context, msgs []inbox.Message) ([]inbox.Outcome, error) {
			outcomes, err := svc.HandleOrderEvents(ctx, msgs)
			if err == nil && handled.Add(int64(len(msgs))) == messages {
				close(done)
			}
			return outcomes, err
		}
		conn := broker.NewConn(amqpURL, "bench")
		c, err := consumer.New(conn, tel, consumer.Config{
			Name: stock.ConsumerName, Queue: contracts.QueueInventoryOrderPlaced, Topology: contracts.Topology, Types: stock.OrderEventTypes, Concurrency: concurrency,
			Batch: countingBatch, Producer: testenv.Login(amqpURL),
		}, counting)
		if err != nil {
			b.Fatal(err)
		}
		cctx, stop := context.WithCancel(ctx)
		stopped := make(chan struct{})
		start := time.Now()
		go func() { defer close(stopped); _ = c.Run(cctx) }()
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			b.Fatalf("inventory handled %d of %d messages", handled.Load(), messages)
		}
		inventoryTime += time.Since(start)
		stop()
		<-stopped
		_ = conn.Close()

		start = time.Now()
		consumeAndAck(b, raw, bare, messages, 2*concurrency)
		bareTime += time.Since(start)
	}
	b.StopTimer()
	inventoryRate := float64(messages*b.N) / inventoryTime.Seconds()
	bareRate := float64(messages*b.N) / bareTime.Seconds()
	b.ReportMetric(inventoryRate, "inventory-msgs/s")
	b.ReportMetric(bareRate, "bare-msgs/s")
	b.ReportMetric(inventoryRate/bareRate, "inventory/bare")
}

// fill publishes n distinct OrderPlaced events, one line each, with confirms, pipelined
// in windows of 256.
func fill(b *testing.B, ch *amqp.Channel, exchange, key string, n int, books []uuid.UUID) {
	b.Helper()
	ctx := context.Background()
	for sent := 0; sent < n; sent += 256 {
		var confirms []*amqp.DeferredConfirmation
		for j := 0; j < 256 && sent+j < n; j++ {
			id := uuid.Must(uuid.NewV7())
			env, err := event.New("bookstore/ordering", contracts.OrderPlaced, id.String(), 1, contracts.OrderPlacedData{
				OrderID: id, CustomerEmail: "ada@example.com", PlacedAt: time.Now().UTC(),
				Lines: []contracts.Line{{BookID: books[(sent+j)%len(books)], Quantity: 1}},
			})
			if err != nil {
				b.Fatal(err)
			}
			body, err := json.Marshal(env)
			if err != nil {
				b.Fatal(err)
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{
				MessageId: env.ID, Type: env.Type, DeliveryMode: amqp.Persistent, ContentType: event.ContentType, Body: body, UserId: testenv.Login(testenv.AMQPBase()),
			})
			if err != nil {
				b.Fatal(err)
			}
			confirms = append(confirms, dc)
		}
		for _, dc := range confirms {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
}

// consumeAndAck is the baseline: receive n messages and ack each, nothing else.
func consumeAndAck(b *testing.B, conn *amqp.Connection, queue string, n, prefetch int) {
	b.Helper()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "bare", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		d, ok := <-deliveries
		if !ok {
			b.Fatalf("channel closed after %d of %d messages", i, n)
		}
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
	}
	if err := ch.Cancel("bare", false); err != nil {
		b.Fatal(err)
	}
}
