package wrongways

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways/wrongstore"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// releaseIgnoringSequence applies a cancellation as it arrives, as stock does, except
// that a cancellation that finds no answer for its order takes its tombstone back:
// nothing to release, so nothing remembered. The placement that comes later finds no
// row and reserves for a cancelled order. StockReleased is always the reservation's
// second event, leaving the first to that placement.
func (c *Consumer) releaseIgnoringSequence(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	cn, err := orderevent.CancellationOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "ReleaseStock")
	defer span.End()
	var r release
	processed, err := inbox.Process(ctx, c.pool, stock.ConsumerName, env, func(tx pgx.Tx) error {
		var err error
		if r, err = releaseWithoutTombstone(ctx, tx, cn); err != nil {
			return err
		}
		return failpoint.Inject(ctx, contracts.InventoryBeforeReleaseCommit)
	})
	outcome, err := inbox.Settle(ctx, processed, err, c.hooks.afterCommit)
	if err != nil || outcome == inbox.Duplicate {
		return outcome, err
	}
	if r.stale {
		c.log.WarnContext(ctx, "cancellation at or below the order's last sequence; nothing done",
			"order_id", cn.OrderID, "sequence", cn.Sequence, "message_id", env.ID)
		return inbox.Duplicate, nil
	}
	return inbox.Processed, nil
}

// releaseWithoutTombstone is cancel, then the order's row forgotten if the cancellation
// wrote it, then StockReleased at sequence 2.
func releaseWithoutTombstone(ctx context.Context, tx pgx.Tx, cn orderevent.Cancellation) (release, error) {
	r, err := cancel(ctx, tx, cn)
	if err != nil || r.stale {
		return r, err
	}
	if r.previous == "" {
		if err := wrongstore.New(tx).ForgetOrderAnswer(ctx, cn.OrderID); err != nil {
			return r, fmt.Errorf("forget order answer: %w", err)
		}
	}
	return r, announceRelease(ctx, tx, cn, r, 2)
}
