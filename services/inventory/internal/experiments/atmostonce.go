package experiments

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
)

// RecordFirstResult is the measurement of RecordFirstCrashBeforeTheWorkCommits.
type RecordFirstResult struct {
	Ordered int // copies of Dune in Ada's order: what a correct design reserves
	// Skipped: the redelivery found the message recorded and did nothing.
	Skipped      bool
	DuneReserved int
	// DuneReservedByStock is Dune's reserved count after the same crash and redelivery
	// of another order through stock's handler, whose record and work commit together.
	DuneReservedByStock int
}

func (r RecordFirstResult) String() string {
	return fmt.Sprintf("[record-first] record committed, crash before the work commits, redelivered -> skipped: %t; Dune reserved: %s %s",
		r.Skipped, wanted(r.DuneReserved, r.Ordered), reservedVerdict(r.DuneReserved, r.Ordered))
}

// RecordFirstCrashBeforeTheWorkCommits: the consumer turns check-then-process round to
// close its double. It records Ada's message in the inbox and commits that, then dies
// before the reservation commits. The redelivery finds the record and skips: the copies
// are never reserved (at most once). stock's handler, whose inbox row commits with the
// reservation, loses both in the same crash and reserves on the redelivery.
func (l *Lab) RecordFirstCrashBeforeTheWorkCommits(ctx context.Context) (RecordFirstResult, error) {
	r := RecordFirstResult{Ordered: adaCopies}
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	crashing, err := l.wrongConsumer(wrongways.Options{Strategy: wrongways.Inbox, RecordFirst: true, Hooks: wrongways.Hooks{BeforeCommit: crash}})
	if err != nil {
		return r, err
	}
	if _, err := crashing.HandleOrderEvent(ctx, msg); !errors.Is(err, errSimulatedCrash) {
		return r, fmt.Errorf("first delivery: want the simulated crash, got %v", err)
	}
	restarted, err := l.wrongConsumer(wrongways.Options{Strategy: wrongways.Inbox, RecordFirst: true})
	if err != nil {
		return r, err
	}
	outcome, err := restarted.HandleOrderEvent(ctx, msg)
	if err != nil {
		return r, fmt.Errorf("redelivery: %w", err)
	}
	r.Skipped = outcome == inbox.Duplicate
	if r.DuneReserved, err = l.duneReserved(ctx); err != nil {
		return r, err
	}

	if err := l.reset(ctx); err != nil {
		return r, err
	}
	if msg, err = adasOrder(adaCopies); err != nil {
		return r, err
	}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	if err := l.crashAtOutcomeEvent(ctx, svc, msg); err != nil {
		return r, err
	}
	if _, err := svc.HandleOrderEvent(ctx, msg); err != nil {
		return r, fmt.Errorf("stock's redelivery: %w", err)
	}
	r.DuneReservedByStock, err = l.duneReserved(ctx)
	return r, err
}

// AckFirstResult is the measurement of AckBeforeTheWorkCommits.
type AckFirstResult struct {
	Ordered int // copies of Dune in Ada's order: what a correct design reserves
	// LeftInQueue is how many messages the broker held once the consumer had died: the
	// one a correct consumer had not acked, to deliver again.
	LeftInQueue  int
	DuneReserved int
	// DuneReservedByConsumer is Dune's reserved count after the same crash of another
	// order's handler under the real consumer, which acks after the commit.
	DuneReservedByConsumer int
}

func (r AckFirstResult) String() string {
	return fmt.Sprintf("[ack first] acked on arrival, crash before the work commits -> left in the queue: %s; Dune reserved: %s %s",
		wanted(r.LeftInQueue, 1), wanted(r.DuneReserved, r.Ordered),
		verdict(r.LeftInQueue == 1 && r.DuneReserved == r.Ordered, reservedHarm(r.DuneReserved, r.Ordered)))
}

// AckBeforeTheWorkCommits: a consumer takes Ada's message with automatic
// acknowledgement, so the broker forgets it the moment it is sent, and its handler,
// stock's own, dies before the reservation commits (held at its outcome event, its
// session ended there). The broker has nothing to deliver again: the queue is empty, and
// the copies are never reserved. The real consumer (package consumer), which acks only
// after the handler's commit, meets the same crash with the message still unacked, and
// the message is handled again.
func (l *Lab) AckBeforeTheWorkCommits(ctx context.Context) (AckFirstResult, error) {
	r := AckFirstResult{Ordered: adaCopies}
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	conn := broker.NewConn(l.AMQPURL, "inventory-experiments-ack-first")
	defer conn.Close()
	if err := emptyQueues(ctx, conn); err != nil {
		return r, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	ch, err := conn.Channel(ctx)
	if err != nil {
		return r, err
	}
	letGo, err := l.holdOutbox(ctx)
	if err != nil {
		_ = ch.Close()
		return r, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	died := make(chan error, 1)
	go func() {
		died <- wrongways.ConsumeAckingFirst(cctx, ch, contracts.QueueInventoryOrderPlaced, stock.OrderEventTypes, svc.HandleOrderEvent)
	}()
	if err := l.send(ctx, msg); err != nil {
		letGo()
		return r, err
	}
	err = l.killAtOutcomeEvent(ctx)
	letGo()
	if err != nil {
		cancel()
		<-died
		return r, err
	}
	if err := <-died; err == nil {
		return r, errors.New("acking first: want the crash, got none")
	}
	// The process is dead: its channel goes with it, and the broker takes back whatever
	// the channel held unacked.
	if err := ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return r, err
	}
	if r.LeftInQueue, err = queueDepth(ctx, conn, contracts.QueueInventoryOrderPlaced); err != nil {
		return r, err
	}
	if r.DuneReserved, err = l.duneReserved(ctx); err != nil {
		return r, err
	}

	if err := l.reset(ctx); err != nil {
		return r, err
	}
	if msg, err = adasOrder(adaCopies); err != nil {
		return r, err
	}
	if letGo, err = l.holdOutbox(ctx); err != nil {
		return r, err
	}
	defer letGo()
	stop, err := l.startConsumer(ctx, conn, consumer.Config{RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}, svc.HandleOrderEvent)
	if err != nil {
		return r, err
	}
	defer stop()
	if err := l.send(ctx, msg); err != nil {
		return r, err
	}
	err = l.killAtOutcomeEvent(ctx)
	letGo()
	if err != nil {
		return r, err
	}
	if err := sandbox.WaitFor(ctx, l.Pool, 10*time.Second, "the real consumer's reservation after the crash",
		"SELECT EXISTS (SELECT 1 FROM inbox WHERE message_id = $1)", msg.UUID()); err != nil {
		return r, err
	}
	r.DuneReservedByConsumer, err = l.duneReserved(ctx)
	return r, err
}

// killAtOutcomeEvent waits for a handler to be held at its outcome event (holdOutbox) and
// ends its session there, as the process dying would: Postgres rolls back its
// transaction.
func (l *Lab) killAtOutcomeEvent(ctx context.Context) error {
	pid, err := sandbox.WaitForLockWait(ctx, l.Pool, "INSERT INTO outbox", 10*time.Second)
	if err != nil {
		return err
	}
	if pid == 0 {
		return errors.New("the handler never reached its outcome event")
	}
	_, err = l.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
	return err
}

// emptyQueues declares inventory's queues as the deployment does and purges its queue
// for OrderPlaced and that queue's dead-letter queue, so that an experiment counts only
// its own messages.
func emptyQueues(ctx context.Context, conn *broker.Conn) error {
	ch, err := conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := contracts.InventoryTopology.Declare(ch, func() (*amqp.Channel, error) { return conn.Channel(ctx) }); err != nil {
		return fmt.Errorf("declare inventory's queues: %w", err)
	}
	for _, q := range []string{contracts.QueueInventoryOrderPlaced, broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ()} {
		if _, err := ch.QueuePurge(q, false); err != nil {
			return fmt.Errorf("purge %s: %w", q, err)
		}
	}
	return nil
}

// queueDepth is how many messages queue holds ready for a consumer.
func queueDepth(ctx context.Context, conn *broker.Conn, queue string) (int, error) {
	ch, err := conn.Channel(ctx)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("inspect %s: %w", queue, err)
	}
	return q.Messages, nil
}
