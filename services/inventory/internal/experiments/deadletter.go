package experiments

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
)

// DeadLetterResult is the measurement of InboxSameIDDifferentContent.
type DeadLetterResult struct {
	// DeadLettered: the second message was found in inventory.order-placed.dlq.
	DeadLettered bool
	DuneReserved int
}

func (r DeadLetterResult) String() string {
	if r.DeadLettered {
		return "[inbox] same id, different content -> dead-lettered"
	}
	return "[inbox] same id, different content -> NOT dead-lettered"
}

// InboxSameIDDifferentContent: a producer reuses a message id for different content (here
// three copies instead of two). Skipping it as a duplicate would silently drop an order;
// processing it would break "one id, one event". The inbox compares the content hash it
// stored, calls it poison, and the real consumer rejects it without requeue onto the
// real dead-letter queue, in this lab's own virtual host.
func (l *Lab) InboxSameIDDifferentContent(ctx context.Context) (DeadLetterResult, error) {
	var r DeadLetterResult
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	original, err := adasOrder(2)
	if err != nil {
		return r, err
	}
	altered := original
	var data contracts.OrderPlacedData
	if err := json.Unmarshal(original.Data, &data); err != nil {
		return r, err
	}
	data.Lines[0].Quantity = 3
	if altered.Data, err = json.Marshal(data); err != nil {
		return r, err
	}

	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	conn := broker.NewConn(l.AMQPURL, "inventory-experiments")
	defer conn.Close()
	c, err := consumer.New(conn, l.Tel, consumer.Config{
		Name:        stock.ConsumerName,
		Queue:       contracts.QueueInventoryOrderPlaced,
		Topology:    contracts.Topology,
		Types:       stock.OrderEventTypes,
		Producer:    conn.Login(), // the experiment publishes ordering's events itself, below
		Concurrency: 1,
	}, svc.HandleOrderEvent)
	if err != nil {
		return r, err
	}
	cctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = c.Run(cctx) }()
	defer func() { stop(); <-stopped }()
	// The consumer declares the topology; the publisher only publishes into one that
	// exists (docs/outbox.md).
	for deadline := time.Now().Add(10 * time.Second); c.Ready(ctx) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("the consumer did not start consuming: %w", c.Ready(ctx))
		}
	}

	pub := broker.NewPublisher(conn, contracts.Topology, 10*time.Second)
	defer pub.Close()
	if err := publish(ctx, pub, original); err != nil {
		return r, err
	}
	if err := sandbox.WaitFor(ctx, l.Pool, 10*time.Second, "the original in the inbox",
		"SELECT count(*) = 1 FROM inbox WHERE message_id = $1", original.UUID()); err != nil {
		return r, err
	}
	if err := publish(ctx, pub, altered); err != nil {
		return r, err
	}
	if r.DeadLettered, err = awaitDeadLetter(ctx, conn, broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ(), altered.ID, 10*time.Second); err != nil {
		return r, err
	}
	r.DuneReserved, err = l.duneReserved(ctx)
	return r, err
}

// publish sends env as ordering's relay would: to the events exchange, routing key = type.
func publish(ctx context.Context, pub *broker.Publisher, env event.Envelope) error {
	msg, err := broker.EventMessage(env, "ordering")
	if err != nil {
		return err
	}
	errs := pub.PublishBatch(ctx, []broker.Message{msg})
	if errs[0] != nil {
		return fmt.Errorf("publish %s: %w", env.ID, errs[0])
	}
	return nil
}

// awaitDeadLetter takes messages off dlq until one with messageID arrives, or timeout.
func awaitDeadLetter(ctx context.Context, conn *broker.Conn, dlq, messageID string, timeout time.Duration) (bool, error) {
	ch, err := conn.Channel(ctx)
	if err != nil {
		return false, err
	}
	defer ch.Close()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(dlq, true)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", dlq, err)
		}
		if ok && d.MessageId == messageID {
			return true, nil
		}
		if !ok {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return false, nil
}
