package experiments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
)

// CommitThenPublishResult is the measurement of CommitThenPublish.
type CommitThenPublishResult struct {
	OrderStatus string // the order's status in the database
	Orders      int    // orders in the database: a correct design publishes one event each
	Published   int    // events that reached the queue
}

func (r CommitThenPublishResult) String() string {
	return fmt.Sprintf("[commit-then-publish] crash between commit and publish -> order: %s, events published: %s %s",
		r.OrderStatus, wanted(r.Published, r.Orders), verdict(r.Published == r.Orders, "the order's event lost"))
}

// CommitThenPublish: the order commits, and the process dies before it publishes. The
// restarted process has no trace of the event to send again, so inventory never hears of
// the order, which stays pending for ever.
func (l *Lab) CommitThenPublish(ctx context.Context) (CommitThenPublishResult, error) {
	oneAtATime.Lock()
	defer oneAtATime.Unlock()
	var r CommitThenPublishResult
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	pub, closePub := newPublisher(l.AMQPURL)
	defer closePub()
	crashed := false
	crash := func(context.Context) error { crashed = true; return errSimulatedCrash }
	ans, err := l.placeOrder(ctx, wrongways.CommitThenPublish{Pub: pub, BeforePublish: crash})
	if err != nil {
		return r, fmt.Errorf("place the order: %w", err)
	}
	if !crashed {
		return r, errors.New("commit-then-publish: want the simulated crash after the commit, and it never came")
	}
	if err := l.Pool.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", ans.Order.ID).Scan(&r.OrderStatus); err != nil {
		return r, fmt.Errorf("read the order: %w", err)
	}
	if r.Orders, err = l.count(ctx, "SELECT count(*) FROM orders"); err != nil {
		return r, err
	}
	copies, err := l.copies(ctx)
	r.Published = len(copies)
	return r, err
}

// publishThenCommit publishes the event inside the order's transaction, before the
// commit: wrongways.Events whose InTx waits for the broker's confirm.
type publishThenCommit struct{ pub *broker.Publisher }

func (w publishThenCommit) InTx(ctx context.Context, _ pgx.Tx, env event.Envelope) error {
	return wrongways.Publish(ctx, w.pub, env)
}

func (publishThenCommit) Committed(context.Context, event.Envelope) error { return nil }

// PublishThenCommitResult is the measurement of PublishThenCommit.
type PublishThenCommitResult struct {
	Orders    int // orders in the database: a correct design publishes one event each
	Published int // events that reached the queue
	Phantoms  int // of those, events of an order the database does not have
}

func (r PublishThenCommitResult) String() string {
	harm := fmt.Sprintf("%d phantoms", r.Phantoms)
	if r.Phantoms == 1 {
		harm = "a phantom: an event of an order that does not exist"
	}
	return fmt.Sprintf("[publish-then-commit] rollback after publish -> orders: %d, events published: %s %s",
		r.Orders, wanted(r.Published, r.Orders), verdict(r.Published == r.Orders && r.Phantoms == 0, harm))
}

// PublishThenCommit: the event is published and confirmed, then the order's transaction
// rolls back. Here the failpoint ordering/before-commit returns an error after every
// write; a deadlock, a constraint, a lost connection or a crash before the commit ends
// the same way. The broker has an event for an order that does not exist, and no one
// can take it back.
func (l *Lab) PublishThenCommit(ctx context.Context) (PublishThenCommitResult, error) {
	oneAtATime.Lock()
	defer oneAtATime.Unlock()
	var r PublishThenCommitResult
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	pub, closePub := newPublisher(l.AMQPURL)
	defer closePub()
	if err := failpoint.Configure(contracts.OrderingBeforeCommit+"=error", contracts.Failpoints); err != nil {
		return r, err
	}
	_, err := l.placeOrder(ctx, publishThenCommit{pub: pub})
	_ = failpoint.Configure("", contracts.Failpoints)
	if !errors.Is(err, failpoint.ErrInjected) {
		return r, fmt.Errorf("publish-then-commit: want the transaction rolled back at the failpoint, got %v", err)
	}
	if r.Orders, err = l.count(ctx, "SELECT count(*) FROM orders"); err != nil {
		return r, err
	}
	copies, err := l.copies(ctx)
	if err != nil {
		return r, err
	}
	r.Published = len(copies)
	for _, c := range copies {
		id, err := orderOf(c)
		if err != nil {
			return r, err
		}
		n, err := l.count(ctx, "SELECT count(*) FROM orders WHERE id::text = $1", id)
		if err != nil {
			return r, err
		}
		if n == 0 {
			r.Phantoms++
		}
	}
	return r, nil
}
