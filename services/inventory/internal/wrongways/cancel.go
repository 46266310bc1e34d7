package wrongways

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
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
	cn, err := stock.CancellationOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "ReleaseStock")
	defer span.End()
	var r stock.Release
	processed, err := inbox.Process(ctx, c.pool, stock.ConsumerName, env, func(tx pgx.Tx) error {
		var err error
		if r, err = releaseWithoutTombstone(ctx, tx, cn); err != nil {
			return err
		}
		return failpoint.Inject(ctx, contracts.InventoryBeforeReleaseCommit)
	})
	if err != nil {
		return 0, err
	}
	if err := c.hooks.afterCommit(ctx); err != nil {
		return 0, err
	}
	if !processed {
		return inbox.Duplicate, nil
	}
	c.stock.Count(ctx, r.Outcome())
	if r.Stale {
		c.log.WarnContext(ctx, "cancellation at or below the order's last sequence; nothing done",
			"order_id", cn.OrderID, "sequence", cn.Sequence, "message_id", env.ID)
		return inbox.Duplicate, nil
	}
	return inbox.Processed, nil
}

// releaseWithoutTombstone is stock.Cancel, then the order's row forgotten if the
// cancellation wrote it, then StockReleased at sequence 2.
func releaseWithoutTombstone(ctx context.Context, tx pgx.Tx, cn stock.Cancellation) (stock.Release, error) {
	r, err := stock.Cancel(ctx, tx, cn)
	if err != nil || r.Stale {
		return r, err
	}
	if r.Previous == "" {
		if err := store.New(tx).ForgetOrderAnswer(ctx, cn.OrderID); err != nil {
			return r, fmt.Errorf("forget order answer: %w", err)
		}
	}
	return r, stock.AnnounceRelease(ctx, tx, cn, r, 2)
}
