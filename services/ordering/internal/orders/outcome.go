package orders

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// ConsumerName is ordering's key in its inbox.
const ConsumerName = "ordering"

// StockEventTypes are the events ApplyStockOutcome handles.
var StockEventTypes = []string{contracts.StockReserved, contracts.StockRejected, contracts.StockReleased}

// ApplyStockOutcome moves an order to confirmed or rejected when inventory has decided.
// The inbox row and the status change commit together, so a redelivery is a duplicate
// and never a second transition.
func (s *Service) ApplyStockOutcome(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	if env.Type == contracts.StockReleased {
		return s.recordRelease(ctx, env)
	}
	orderID, status, err := outcomeOf(env)
	if err != nil {
		return 0, err
	}
	processed, err := inbox.Process(ctx, s.pool, ConsumerName, env, func(tx pgx.Tx) error {
		row, err := store.New(tx).ApplyStockOutcome(ctx, store.ApplyStockOutcomeParams{ID: orderID, Status: string(status)})
		if errors.Is(err, pgx.ErrNoRows) {
			return s.explainNoTransition(ctx, tx, orderID, status, env)
		}
		if err != nil {
			return err
		}
		return store.New(tx).InsertOrderHistory(ctx, store.InsertOrderHistoryParams{OrderID: orderID, Event: string(status), At: row.UpdatedAt})
	})
	return inbox.Settle(ctx, processed, err, afterCommit)
}

// afterCommit is the step between a message's commit and its ack, where the failpoint
// ordering/after-commit crashes the process: the event is redelivered, and the inbox
// makes the redelivery a duplicate.
func afterCommit(ctx context.Context) error {
	return failpoint.Inject(ctx, contracts.OrderingAfterCommit)
}

// errNotAllPending is the error of a batch in which an outcome met an order that is not
// pending. The batch rolls back and its outcomes are applied one at a time, where
// ApplyStockOutcome tells a repeated outcome from an unknown order.
var errNotAllPending = errors.New("an order of the batch is not pending")

// errReleaseInBatch is the error of a batch that holds a StockReleased, which is
// recorded alone, as is every message of its batch.
var errReleaseInBatch = errors.New("a release is recorded alone")

// ApplyStockOutcomes is ApplyStockOutcome for outcomes that arrived together: one
// transaction, one inbox claim and one update for all of them. Anything unusual (a copy
// of a message processed before, an order not pending) rolls the batch back, and the
// consumer applies each outcome alone.
func (s *Service) ApplyStockOutcomes(ctx context.Context, msgs []inbox.Message) ([]inbox.Outcome, error) {
	envs := make([]event.Envelope, len(msgs))
	var changes store.ApplyStockOutcomesParams
	for i, m := range msgs {
		if m.Envelope.Type == contracts.StockReleased {
			return nil, errReleaseInBatch
		}
		id, status, err := outcomeOf(m.Envelope)
		if err != nil {
			return nil, err
		}
		envs[i] = m.Envelope
		changes.Ids = append(changes.Ids, id)
		changes.Statuses = append(changes.Statuses, string(status))
	}
	err := inbox.ProcessAll(ctx, s.pool, ConsumerName, envs, func(tx pgx.Tx) error {
		n, err := store.New(tx).ApplyStockOutcomes(ctx, changes)
		if err == nil && n != int64(len(msgs)) {
			err = errNotAllPending
		}
		if err != nil {
			return err
		}
		return store.New(tx).InsertOrderHistories(ctx, store.InsertOrderHistoriesParams{Ids: changes.Ids, Events: changes.Statuses})
	})
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject(ctx, contracts.OrderingAfterCommit); err != nil {
		return nil, err
	}
	return slices.Repeat([]inbox.Outcome{inbox.Processed}, len(msgs)), nil
}

// explainNoTransition handles an outcome that changed no row. An order that already has
// an outcome keeps it (the same outcome sent under a second message id changes nothing);
// an order cancelled while it was pending stays cancelled (inventory releases whatever
// the outcome reserved when it sees the cancellation); an order that does not exist is
// poison: retrying cannot make it appear.
func (s *Service) explainNoTransition(ctx context.Context, tx pgx.Tx, id uuid.UUID, status Status, env event.Envelope) error {
	row, err := store.New(tx).GetOrder(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return event.Poison(event.ReasonInvalidData, fmt.Errorf("%s for unknown order %s", env.Type, id))
	}
	if err != nil {
		return err
	}
	if Status(row.Status) == Cancelled {
		s.log.InfoContext(ctx, "stock outcome of a cancelled order ignored", "order_id", id, "outcome", status, "event_id", env.ID)
		return nil
	}
	if Status(row.Status) != status {
		s.log.WarnContext(ctx, "conflicting stock outcome ignored", "order_id", id, "status", row.Status, "outcome", status, "event_id", env.ID)
	}
	return nil
}

func outcomeOf(env event.Envelope) (uuid.UUID, Status, error) {
	switch env.Type {
	case contracts.StockReserved:
		var d contracts.StockReservedData
		if err := env.DecodeData(&d); err != nil {
			return uuid.Nil, "", err
		}
		return d.OrderID, Confirmed, validOrderID(d.OrderID, env)
	case contracts.StockRejected:
		var d contracts.StockRejectedData
		if err := env.DecodeData(&d); err != nil {
			return uuid.Nil, "", err
		}
		return d.OrderID, Rejected, validOrderID(d.OrderID, env)
	}
	return uuid.Nil, "", event.Poison(event.ReasonUnknownType, fmt.Errorf("type %q", env.Type))
}

func validOrderID(id uuid.UUID, env event.Envelope) error {
	if p := contracts.OrderIDProblem(id, env.Subject); p != "" {
		return event.Poison(event.ReasonInvalidData, errors.New(p))
	}
	return nil
}

// recordRelease ends a cancelled order's history with "released": inventory has given
// back what it had reserved for it (StockReleased, one per cancellation). The inbox row
// and the history row commit together; the history's primary key keeps a second
// StockReleased under another message id from adding a second entry.
func (s *Service) recordRelease(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	var d contracts.StockReleasedData
	if err := env.DecodeData(&d); err != nil {
		return 0, err
	}
	if err := validOrderID(d.OrderID, env); err != nil {
		return 0, err
	}
	processed, err := inbox.Process(ctx, s.pool, ConsumerName, env, func(tx pgx.Tx) error {
		q := store.New(tx)
		row, err := q.GetOrder(ctx, d.OrderID)
		if errors.Is(err, pgx.ErrNoRows) {
			return event.Poison(event.ReasonInvalidData, fmt.Errorf("%s for unknown order %s", env.Type, d.OrderID))
		}
		if err != nil {
			return err
		}
		if Status(row.Status) != Cancelled {
			// Inventory releases only on ordering's own cancellation, which commits with
			// the status: a release of an order that is not cancelled cannot be ours.
			return event.Poison(event.ReasonInvalidData, fmt.Errorf("%s for order %s, which is %s", env.Type, d.OrderID, row.Status))
		}
		return q.InsertOrderHistory(ctx, store.InsertOrderHistoryParams{OrderID: d.OrderID, Event: "released", At: time.Now().UTC().Truncate(time.Microsecond)})
	})
	return inbox.Settle(ctx, processed, err, afterCommit)
}
