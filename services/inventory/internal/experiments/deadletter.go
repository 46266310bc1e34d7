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
	Ordered int // copies of Dune in Ada's order, the original: what a correct design reserves
	// DeadLettered: the second message was found in inventory.order-placed.dlq, which is
	// where a correct design puts a message it can never apply.
	DeadLettered bool
	DuneReserved int
}

func (r DeadLetterResult) String() string {
	harm := "a producer's bug dropped in silence"
	if r.DuneReserved != r.Ordered {
		harm = reservedHarm(r.DuneReserved, r.Ordered)
	}
	return fmt.Sprintf("[inbox] same id, different content -> dead-lettered: %s; Dune reserved: %s %s",
		wanted(r.DeadLettered, true), wanted(r.DuneReserved, r.Ordered), verdict(r.DeadLettered && r.DuneReserved == r.Ordered, harm))
}

// InboxSameIDDifferentContent: a producer reuses a message id for different content (here
// three copies instead of two). Skipping it as a duplicate would silently drop an order;
// processing it would break "one id, one event". The inbox compares the content hash it
// stored, calls it poison, and the real consumer rejects it without requeue onto the
// real dead-letter queue, in this lab's own virtual host.
func (l *Lab) InboxSameIDDifferentContent(ctx context.Context) (DeadLetterResult, error) {
	r := DeadLetterResult{Ordered: adaCopies}
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	original, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	altered := original
	var data contracts.OrderPlacedData
	if err := json.Unmarshal(original.Data, &data); err != nil {
		return r, err
	}
	data.Lines[0].Quantity = adaCopies + 1
	if altered.Data, err = json.Marshal(data); err != nil {
		return r, err
	}

	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	conn := broker.NewConn(l.AMQPURL, "inventory-experiments")
	defer conn.Close()
	stop, err := l.startConsumer(ctx, conn, consumer.Config{}, svc.HandleOrderEvent)
	if err != nil {
		return r, err
	}
	defer stop()

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

// startConsumer runs the real consumer of inventory.order-placed on conn, as inventory
// configures it, one delivery at a time, with cfg's retry settings, handing every
// delivery to handle. It returns once the consumer is consuming; stop ends it and waits
// until every delivery it started is settled.
func (l *Lab) startConsumer(ctx context.Context, conn *broker.Conn, cfg consumer.Config, handle consumer.Handler) (stop func(), err error) {
	c, err := consumer.New(conn, l.Tel, consumer.Config{
		Name:        stock.ConsumerName,
		Queue:       contracts.QueueInventoryOrderPlaced,
		Topology:    contracts.Topology,
		Types:       stock.OrderEventTypes,
		Producer:    conn.Login(), // the experiments publish ordering's events themselves
		Concurrency: 1,
		RetryBase:   cfg.RetryBase,
		RetryMax:    cfg.RetryMax,
	}, handle)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = c.Run(cctx) }()
	stop = func() { cancel(); <-stopped }
	// The consumer declares the topology; the publisher only publishes into one that
	// exists (docs/outbox.md).
	for deadline := time.Now().Add(10 * time.Second); c.Ready(ctx) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("the consumer did not start consuming: %w", c.Ready(ctx))
		}
	}
	return stop, nil
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
