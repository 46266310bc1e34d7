package wrongways

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// reserveRecordFirst is check-then-process turned round: it records the message in the
// inbox and commits that, then reserves in a second transaction. A redelivery after the
// record meets it and is skipped, so nothing is applied twice; but a crash after the
// record and before the work commits (the BeforeCommit hook, or the failpoint
// inventory/before-commit) leaves the message recorded and the work undone, and the
// redelivery skips the work for good: at most once, a loss instead of a double.
func (c *Consumer) reserveRecordFirst(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	o, err := orderevent.OrderOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "ReserveStock record-first")
	defer span.End()
	var claimed bool
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		claimed, err = inbox.Claim(ctx, tx, stock.ConsumerName, env)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record message: %w", err)
	}
	if !claimed {
		return inbox.Duplicate, nil
	}
	// The message is recorded and the reservation not yet committed: the window.
	if err := c.reserveInOwnTransaction(ctx, o); err != nil {
		return 0, err
	}
	if err := c.hooks.afterCommit(ctx); err != nil {
		return 0, err
	}
	return inbox.Processed, nil
}

// reserveByMessageIDOnly is the inbox without stock's order key: the message's inbox row,
// the reservation and the outcome event in one transaction, as stock's, but the
// reservation is made every time the inbox lets a message through, with no row in
// order_answers or reservations to refuse a second answer to the same order. The message
// id is then all that tells a copy from a new order, which is enough against the
// broker's redeliveries and the relay's second publish (both keep the id) and nothing
// against a producer that mints a new id when it sends again. A consumer whose work has
// no natural key, such as an email, is in this position.
func (c *Consumer) reserveByMessageIDOnly(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	o, err := orderevent.OrderOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "ReserveStock message-id-only")
	defer span.End()
	processed, err := inbox.Process(ctx, c.pool, stock.ConsumerName, env, func(tx pgx.Tx) error {
		if err := reserveAgain(ctx, tx, o); err != nil {
			return err
		}
		return c.hooks.beforeCommit(ctx)
	})
	return inbox.Settle(ctx, processed, err, c.hooks.afterCommit)
}
