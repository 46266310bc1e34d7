package wrongways

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// reserveThroughPool is a placement behind the inbox, as stock's, with one write sent the
// wrong way: the inbox claim and the outcome event go through tx, and the copies are
// added to the books' reserved counts through c.pool, another connection, whose statement commits
// on its own the moment it runs. Nothing in the code looks wrong: the pool is in scope
// inside the work, and the query takes either. When the transaction rolls back (the
// BeforeCommit hook, or a crash before the commit), the claim and the event are gone and
// the copies stay reserved; the redelivery finds no claim and reserves them again.
//
// It reserves without locking the books first, as stock does, whose row locks would make the mistake hang instead:
// the write through the pool would wait for the locks of the transaction that waits for
// the write, and Postgres sees no deadlock, since the cycle runs through the program.
func (c *Consumer) reserveThroughPool(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	o, err := orderevent.OrderOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "ReserveStock through-pool")
	defer span.End()
	processed, err := inbox.Process(ctx, c.pool, stock.ConsumerName, env, func(tx pgx.Tx) error {
		if err := addReserved(ctx, store.New(c.pool), o); err != nil { // the mistake: c.pool, not tx
			return err
		}
		if err := announce(ctx, tx, o, answer{reserved: true}, 1); err != nil {
			return err
		}
		return c.hooks.beforeCommit(ctx)
	})
	return inbox.Settle(ctx, processed, err, c.hooks.afterCommit)
}
