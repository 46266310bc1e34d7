package experiments

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
)

// FreshIDResult is the measurement of FreshIDPerSend.
type FreshIDResult struct {
	Ordered int // copies of Dune in Ada's order: what a correct design reserves
	// MessageIDs is how many ids the producer gave Ada's one order over its two sends: a
	// correct producer gives one.
	MessageIDs   int
	DuneReserved int
	// DuneReservedKeptID is Dune's reserved count when the producer sent the message it
	// minted once, the same id twice, to the same consumer.
	DuneReservedKeptID int
	// DuneReservedByStock is Dune's reserved count when the new ids reached stock's
	// handler, whose order key refuses a second answer to one order.
	DuneReservedByStock int
}

func (r FreshIDResult) String() string {
	return fmt.Sprintf("[fresh id per send] producer retries a lost confirm with a new id -> message ids: %s; Dune reserved: %s %s",
		wanted(r.MessageIDs, 1), wanted(r.DuneReserved, r.Ordered),
		verdict(r.MessageIDs == 1 && r.DuneReserved == r.Ordered, reservedHarm(r.DuneReserved, r.Ordered)))
}

// FreshIDPerSend: a producer sends Ada's order, the broker takes it and the confirm is
// lost on its way back, and the producer sends again, building the message anew: a new
// id for the same order. A consumer whose only guard is the inbox keyed on the message id
// sees two messages and reserves twice. The same producer with the id minted once, before
// the first send (as the outbox's row id is), sends the same id twice, and the inbox skips
// the second. Both go through the real RabbitMQ and the real consumer.
func (l *Lab) FreshIDPerSend(ctx context.Context) (FreshIDResult, error) {
	r := FreshIDResult{Ordered: adaCopies}
	byID, err := l.wrongConsumer(wrongways.Options{Strategy: wrongways.Inbox, MessageIDOnly: true})
	if err != nil {
		return r, err
	}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	runs := []struct {
		freshID  bool
		handle   consumer.Handler
		reserved *int
	}{
		{true, byID.HandleOrderEvent, &r.DuneReserved},
		{false, byID.HandleOrderEvent, &r.DuneReservedKeptID},
		{true, svc.HandleOrderEvent, &r.DuneReservedByStock},
	}
	for i, run := range runs {
		if err := l.reset(ctx); err != nil {
			return r, err
		}
		orderID, err := uuid.NewV7()
		if err != nil {
			return r, err
		}
		once, err := orderEvent(orderID, adaCopies)
		if err != nil {
			return r, err
		}
		next := func() (event.Envelope, error) { return once, nil }
		if run.freshID {
			next = func() (event.Envelope, error) { return orderEvent(orderID, adaCopies) }
		}
		var ids []string
		err = l.throughTheBroker(ctx, consumer.Config{}, run.handle, func(pub *broker.Publisher) (int, error) {
			var err error
			ids, err = sendUntilConfirmed(ctx, pub, next, func(attempt int) bool { return attempt == 1 })
			return len(ids), err
		})
		if err != nil {
			return r, err
		}
		if i == 0 {
			distinct := map[string]bool{}
			for _, id := range ids {
				distinct[id] = true
			}
			r.MessageIDs = len(distinct)
		}
		if *run.reserved, err = l.duneReserved(ctx); err != nil {
			return r, err
		}
	}
	return r, nil
}

// sendUntilConfirmed is a producer with a retry: it sends an order's message, and sends
// it again while it sees no confirm. next gives the message of each attempt, which is
// where the id comes from; confirmLost says which attempts' confirms never reached the
// producer, though the broker had taken the message. It returns the ids it sent.
func sendUntilConfirmed(ctx context.Context, pub *broker.Publisher, next func() (event.Envelope, error), confirmLost func(attempt int) bool) ([]string, error) {
	var ids []string
	for attempt := 1; ; attempt++ {
		env, err := next()
		if err != nil {
			return ids, err
		}
		if err := publish(ctx, pub, env); err != nil {
			return ids, err
		}
		ids = append(ids, env.ID)
		if !confirmLost(attempt) {
			return ids, nil
		}
	}
}

// FailedDuplicateResult is the measurement of DuplicateFailedInsteadOfAcked.
type FailedDuplicateResult struct {
	Ordered int // copies of Dune in Ada's order: what a correct design reserves
	// Copies is how many copies of Ada's message were published: a correct consumer
	// handles each once.
	Copies int
	// Deliveries is how often the consumer's handler was handed the message.
	Deliveries int
	// DeadLettered: the message reached inventory.order-placed.dlq.
	DeadLettered bool
	DuneReserved int
	// DeliveriesByStock and DeadLetteredByStock are the same counts with stock's handler,
	// which acks the copy as a duplicate.
	DeliveriesByStock   int
	DeadLetteredByStock bool
}

func (r FailedDuplicateResult) String() string {
	return fmt.Sprintf("[duplicate as failure] a processed message delivered again, its copy failed -> deliveries: %s, dead-lettered: %s; Dune reserved: %s %s",
		wanted(r.Deliveries, r.Copies), wanted(r.DeadLettered, false), wanted(r.DuneReserved, r.Ordered),
		verdict(r.Deliveries == r.Copies && !r.DeadLettered && r.DuneReserved == r.Ordered,
			"looped until the dead-letter queue"))
}

// DuplicateFailedInsteadOfAcked: Ada's message is published twice with one id (the
// relay's second publish after a crash). The first copy reserves; on the second, the
// inbox says duplicate, and a handler that throws that as an error has the real consumer
// reject the copy back to the queue, where the broker delivers it again, until the
// queue's delivery limit dead-letters it. The consumer's requeue backoff is shortened to
// a millisecond so that the loop takes a second, not minutes. stock's handler acks the
// duplicate: two deliveries, nothing dead-lettered.
func (l *Lab) DuplicateFailedInsteadOfAcked(ctx context.Context) (FailedDuplicateResult, error) {
	r := FailedDuplicateResult{Ordered: adaCopies, Copies: 2}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	fast := consumer.Config{RetryBase: time.Millisecond, RetryMax: time.Millisecond}
	dlq := broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ()

	if err := l.reset(ctx); err != nil {
		return r, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	conn := broker.NewConn(l.AMQPURL, "inventory-experiments-duplicates")
	defer conn.Close()
	handle, deliveries := counted(wrongways.FailingDuplicates(svc.HandleOrderEvent))
	err = l.throughTheBroker(ctx, fast, handle, func(pub *broker.Publisher) (int, error) {
		if err := l.publishCopies(ctx, pub, msg, r.Copies); err != nil {
			return 0, err
		}
		if r.DeadLettered, err = awaitDeadLetter(ctx, conn, dlq, msg.ID, 30*time.Second); err != nil {
			return 0, err
		}
		if !r.DeadLettered {
			return 0, errors.New("the failed duplicate never reached the dead-letter queue")
		}
		return 0, nil
	})
	if err != nil {
		return r, err
	}
	r.Deliveries = int(deliveries())
	if r.DuneReserved, err = l.duneReserved(ctx); err != nil {
		return r, err
	}

	if err := l.reset(ctx); err != nil {
		return r, err
	}
	if msg, err = adasOrder(adaCopies); err != nil {
		return r, err
	}
	handle, deliveries = counted(svc.HandleOrderEvent)
	err = l.throughTheBroker(ctx, fast, handle, func(pub *broker.Publisher) (int, error) {
		return r.Copies, l.publishCopies(ctx, pub, msg, r.Copies)
	})
	if err != nil {
		return r, err
	}
	r.DeliveriesByStock = int(deliveries())
	// The consumer has stopped with every delivery settled: what is not in the
	// dead-letter queue now never will be.
	if r.DeadLetteredByStock, err = deadLettered(ctx, conn, dlq, msg.ID); err != nil {
		return r, err
	}
	return r, nil
}

// publishCopies publishes n copies of env, each once the one before is in the inbox: the
// relay's second publish of a row, after the first was consumed.
func (l *Lab) publishCopies(ctx context.Context, pub *broker.Publisher, env event.Envelope, n int) error {
	for i := range n {
		if err := publish(ctx, pub, env); err != nil {
			return err
		}
		if i == 0 {
			if err := sandbox.WaitFor(ctx, l.Pool, 10*time.Second, "the first copy in the inbox",
				"SELECT EXISTS (SELECT 1 FROM inbox WHERE message_id = $1)", env.UUID()); err != nil {
				return err
			}
		}
	}
	return nil
}

// CacheResult is the measurement of CacheAsTheOnlyGuard.
type CacheResult struct {
	Ordered int // copies of Dune in Ada's order: what a correct design reserves
	// ReservedBeforeRestart is Dune's reserved count after two deliveries to one
	// process, whose cache caught the second.
	ReservedBeforeRestart int
	DuneReserved          int
	// DuneReservedByStock is Dune's reserved count after the same deliveries and restart
	// with the same cache in front of stock's handler.
	DuneReservedByStock int
}

func (r CacheResult) String() string {
	return fmt.Sprintf("[cache as the guard] set-if-absent in memory: delivered twice -> Dune reserved: %d; restarted, redelivered -> Dune reserved: %s %s",
		r.ReservedBeforeRestart, wanted(r.DuneReserved, r.Ordered), reservedVerdict(r.DuneReserved, r.Ordered))
}

// CacheAsTheOnlyGuard: a consumer keeps the ids it has seen in a cache (an in-memory set
// with an atomic set-if-absent, as Redis's SET NX is) and does the work with no dedup of
// its own (naive). Two deliveries to one process reserve once: the cache works, and a
// test that stops there passes. Then the process restarts, its cache empty (a Redis
// eviction or an expired key does the same), and the broker delivers Ada's message again,
// its first ack lost: the cache has never seen it and the work is done twice. The same
// cache in front of stock's handler lets the redelivery through too, and the inbox skips
// it: the cache spares the database a duplicate's transaction, and only the inbox, in the
// work's transaction, decides.
func (l *Lab) CacheAsTheOnlyGuard(ctx context.Context) (CacheResult, error) {
	r := CacheResult{Ordered: adaCopies}
	naive, err := l.wrongWay(wrongways.Naive, wrongways.Hooks{})
	if err != nil {
		return r, err
	}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	for i, handle := range []consumer.Handler{naive.HandleOrderEvent, svc.HandleOrderEvent} {
		if err := l.reset(ctx); err != nil {
			return r, err
		}
		msg, err := adasOrder(adaCopies)
		if err != nil {
			return r, err
		}
		first := wrongways.CheckedInCache(wrongways.NewSeenCache(), handle)
		for range 2 {
			if _, err := first(ctx, msg); err != nil {
				return r, fmt.Errorf("delivery: %w", err)
			}
		}
		if i == 0 {
			if r.ReservedBeforeRestart, err = l.duneReserved(ctx); err != nil {
				return r, err
			}
		}
		restarted := wrongways.CheckedInCache(wrongways.NewSeenCache(), handle)
		if _, err := restarted(ctx, msg); err != nil {
			return r, fmt.Errorf("redelivery after the restart: %w", err)
		}
		n, err := l.duneReserved(ctx)
		if err != nil {
			return r, err
		}
		if i == 0 {
			r.DuneReserved = n
		} else {
			r.DuneReservedByStock = n
		}
	}
	return r, nil
}

// throughTheBroker empties inventory's queue, starts the real consumer with handle and
// cfg's retry settings, and has send publish through a publisher of its own. send returns
// how many handler calls to wait for; throughTheBroker returns once handle has returned
// that often, and the consumer has stopped with every delivery settled.
func (l *Lab) throughTheBroker(ctx context.Context, cfg consumer.Config, handle consumer.Handler, send func(*broker.Publisher) (int, error)) error {
	conn := broker.NewConn(l.AMQPURL, "inventory-experiments-consume")
	defer conn.Close()
	if err := emptyQueues(ctx, conn); err != nil {
		return err
	}
	handled := make(chan struct{}, 1024)
	stop, err := l.startConsumer(ctx, conn, cfg, func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		defer func() {
			select {
			case handled <- struct{}{}:
			default:
			}
		}()
		return handle(ctx, env)
	})
	if err != nil {
		return err
	}
	defer stop()
	pconn := broker.NewConn(l.AMQPURL, "inventory-experiments-publish")
	defer pconn.Close()
	pub := broker.NewPublisher(pconn, contracts.Topology, 10*time.Second)
	defer pub.Close()
	n, err := send(pub)
	if err != nil {
		return err
	}
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-handled:
		case <-timeout:
			return fmt.Errorf("the consumer handled fewer than the %d messages sent in 10s", n)
		}
	}
	return nil
}

// send publishes envs, on a connection of its own, as ordering's relay would.
func (l *Lab) send(ctx context.Context, envs ...event.Envelope) error {
	conn := broker.NewConn(l.AMQPURL, "inventory-experiments-publish")
	defer conn.Close()
	pub := broker.NewPublisher(conn, contracts.Topology, 10*time.Second)
	defer pub.Close()
	for _, env := range envs {
		if err := publish(ctx, pub, env); err != nil {
			return err
		}
	}
	return nil
}

// counted wraps handle to count its calls; calls reads the count.
func counted(handle consumer.Handler) (consumer.Handler, func() int64) {
	var n atomic.Int64
	return func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		n.Add(1)
		return handle(ctx, env)
	}, n.Load
}

// deadLettered takes every message off dlq and reports whether one has messageID.
func deadLettered(ctx context.Context, conn *broker.Conn, dlq, messageID string) (bool, error) {
	ch, err := conn.Channel(ctx)
	if err != nil {
		return false, err
	}
	defer ch.Close()
	found := false
	for {
		d, ok, err := ch.Get(dlq, true)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", dlq, err)
		}
		if !ok {
			return found, nil
		}
		found = found || d.MessageId == messageID
	}
}
