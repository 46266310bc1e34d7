package wrongways

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways/wrongstore"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// handleKeyedOnCorrelationID is the work of an order's events behind an inbox claimed under
// the order's id, the correlation id every event of an order carries, instead of under
// the message's id.
// The key then names the order, not the message: the order's first event claims it, and
// every later event of the order, whatever it says, finds it taken and is acked as a
// duplicate. An OrderCancelled that follows its OrderPlaced is swallowed, and the copies
// stay reserved for a cancelled order.
//
// Its claim keeps no content hash, as the usual "seen this key?" table keeps none;
// inbox.Claim, which compares one, would dead-letter the cancellation instead of
// swallowing it, which is louder and still wrong.
func (c *Consumer) handleKeyedOnCorrelationID(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	orderID, work, err := workOf(ctx, env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "HandleOrderEvent correlation-id")
	defer span.End()
	processed := false
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		n, err := wrongstore.New(tx).ClaimInboxUnderKey(ctx, wrongstore.ClaimInboxUnderKeyParams{
			Key: orderID, Consumer: stock.ConsumerName, EventType: env.Type,
		})
		if err != nil {
			return fmt.Errorf("inbox claim under order %s: %w", orderID, err)
		}
		if n == 0 {
			return nil // "seen it": the order's key is taken
		}
		processed = true
		return work(tx)
	})
	return inbox.Settle(ctx, processed, err, c.hooks.afterCommit)
}

// workOf reads env and returns its order's id and the work for it: a placement reserves
// (reserveAgain), a cancellation releases and announces (cancel, announceRelease).
func workOf(ctx context.Context, env event.Envelope) (uuid.UUID, func(pgx.Tx) error, error) {
	if env.Type == contracts.OrderCancelled {
		cn, err := orderevent.CancellationOf(env)
		if err != nil {
			return uuid.Nil, nil, err
		}
		return cn.OrderID, func(tx pgx.Tx) error {
			r, err := cancel(ctx, tx, cn)
			if err != nil || r.stale {
				return err
			}
			sequence := int64(2) // after the placement's outcome
			if r.previous == "" {
				sequence = 1 // the cancellation came first
			}
			return announceRelease(ctx, tx, cn, r, sequence)
		}, nil
	}
	o, err := orderevent.OrderOf(env)
	if err != nil {
		return uuid.Nil, nil, err
	}
	return o.ID, func(tx pgx.Tx) error { return reserveAgain(ctx, tx, o) }, nil
}
