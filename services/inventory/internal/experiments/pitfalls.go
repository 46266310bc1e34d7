package experiments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// CorrelationKeyResult is the measurement of CorrelationIDAsDedupKey.
type CorrelationKeyResult struct {
	// Swallowed: the cancellation was acked as a duplicate and no StockReleased was
	// written for the order.
	Swallowed    bool
	DuneReserved int
	// DuneReservedByStock is Dune's reserved count after the same two events of another
	// order went through stock's handler, whose inbox is keyed on the message id.
	DuneReservedByStock int
}

func (r CorrelationKeyResult) String() string {
	// Placed and then cancelled, the order holds no copies: a correct design reserves 0.
	return fmt.Sprintf("[correlation-id key] placed, then cancelled -> cancellation swallowed: %s; Dune reserved: %s %s",
		wanted(r.Swallowed, false), wanted(r.DuneReserved, 0),
		verdict(!r.Swallowed && r.DuneReserved == 0, fmt.Sprintf("%d copies held for a cancelled order", r.DuneReserved)))
}

// CorrelationIDAsDedupKey: Ada orders two copies of Dune and cancels. Both events carry
// her order's id, the correlation id, and each its own message id. A consumer that keys
// its inbox on the correlation id takes the cancellation for a copy of the placement;
// stock's handler, keyed on the message id, releases the copies.
func (l *Lab) CorrelationIDAsDedupKey(ctx context.Context) (CorrelationKeyResult, error) {
	var r CorrelationKeyResult
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	keyed, err := l.wrongConsumer(wrongways.Options{Strategy: wrongways.Inbox, KeyOnCorrelationID: true})
	if err != nil {
		return r, err
	}
	outcome, err := l.placeThenCancel(ctx, keyed.HandleOrderEvent)
	if err != nil {
		return r, fmt.Errorf("keyed on the correlation id: %w", err)
	}
	released, err := l.releases(ctx)
	if err != nil {
		return r, err
	}
	r.Swallowed = outcome == inbox.Duplicate && released == 0
	if r.DuneReserved, err = l.duneReserved(ctx); err != nil {
		return r, err
	}

	if err := l.reset(ctx); err != nil {
		return r, err
	}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	if _, err := l.placeThenCancel(ctx, svc.HandleOrderEvent); err != nil {
		return r, fmt.Errorf("keyed on the message id: %w", err)
	}
	r.DuneReservedByStock, err = l.duneReserved(ctx)
	return r, err
}

// placeThenCancel hands a new order of two copies of Dune, then its cancellation, to
// handle, and returns what handle said of the cancellation.
func (l *Lab) placeThenCancel(ctx context.Context, handle func(context.Context, event.Envelope) (inbox.Outcome, error)) (inbox.Outcome, error) {
	placed, err := adasOrder(adaCopies)
	if err != nil {
		return 0, err
	}
	cancelled, err := cancellationOf(placed)
	if err != nil {
		return 0, err
	}
	if _, err := handle(ctx, placed); err != nil {
		return 0, fmt.Errorf("placement: %w", err)
	}
	outcome, err := handle(ctx, cancelled)
	if err != nil {
		return 0, fmt.Errorf("cancellation: %w", err)
	}
	return outcome, nil
}

// releases counts the StockReleased events in the outbox.
func (l *Lab) releases(ctx context.Context) (int, error) {
	var n int
	if err := l.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE event_type = $1", contracts.StockReleased).Scan(&n); err != nil {
		return 0, fmt.Errorf("count releases: %w", err)
	}
	return n, nil
}

// PoolWriteResult is the measurement of HandlerWritingThroughThePool.
type PoolWriteResult struct {
	Ordered int // copies of Dune in Ada's order: what a correct design reserves
	// ReservedAfterRollback is Dune's reserved count once the handler's transaction
	// rolled back.
	ReservedAfterRollback int
	// ClaimRolledBack: the message's inbox row was gone after the rollback.
	ClaimRolledBack bool
	// DuneReserved is Dune's reserved count after the redelivery.
	DuneReserved int
}

// WriteSurvived: the write made through the pool outlived the transaction it was made in.
func (r PoolWriteResult) WriteSurvived() bool { return r.ReservedAfterRollback > 0 }

func (r PoolWriteResult) String() string {
	return fmt.Sprintf("[pool write] handler writes through the pool, its transaction rolls back -> write survived: %s, claim rolled back: %t; redelivered -> Dune reserved: %s %s",
		wanted(r.WriteSurvived(), false), r.ClaimRolledBack, wanted(r.DuneReserved, r.Ordered), reservedVerdict(r.DuneReserved, r.Ordered))
}

// HandlerWritingThroughThePool: a handler claims the message's inbox row in its
// transaction, reserves Ada's two copies through the pool instead, and fails before the
// commit. The claim rolls back and the reservation does not; the redelivery, finding no
// claim, reserves again. stock's handler, which writes through its transaction alone,
// leaves nothing after the same failure (InboxCrashBeforeCommit).
func (l *Lab) HandlerWritingThroughThePool(ctx context.Context) (PoolWriteResult, error) {
	r := PoolWriteResult{Ordered: adaCopies}
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	failing, err := l.wrongConsumer(wrongways.Options{
		Strategy: wrongways.Inbox, WriteThroughPool: true, Hooks: wrongways.Hooks{BeforeCommit: crash},
	})
	if err != nil {
		return r, err
	}
	if _, err := failing.HandleOrderEvent(ctx, msg); !errors.Is(err, errSimulatedCrash) {
		return r, fmt.Errorf("first delivery: want the simulated crash, got %v", err)
	}
	if r.ReservedAfterRollback, err = l.duneReserved(ctx); err != nil {
		return r, err
	}
	var claimed bool
	if err := l.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inbox WHERE message_id = $1)", msg.UUID()).Scan(&claimed); err != nil {
		return r, fmt.Errorf("read the inbox: %w", err)
	}
	r.ClaimRolledBack = !claimed
	restarted, err := l.wrongConsumer(wrongways.Options{Strategy: wrongways.Inbox, WriteThroughPool: true})
	if err != nil {
		return r, err
	}
	if _, err := restarted.HandleOrderEvent(ctx, msg); err != nil {
		return r, fmt.Errorf("redelivery: %w", err)
	}
	r.DuneReserved, err = l.duneReserved(ctx)
	return r, err
}

// cancellationOf is the OrderCancelled of placed's order, as ordering's outbox would have
// written it: the order's second event.
func cancellationOf(placed event.Envelope) (event.Envelope, error) {
	o, err := orderevent.OrderOf(placed)
	if err != nil {
		return event.Envelope{}, err
	}
	return event.New(contracts.OrderingSource, contracts.OrderCancelled, placed.Subject, 2, contracts.OrderCancelledData{
		OrderID:       o.ID,
		CustomerEmail: o.CustomerEmail,
		CancelledAt:   time.Now().UTC().Truncate(time.Microsecond),
	})
}
