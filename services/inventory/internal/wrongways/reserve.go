package wrongways

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways/wrongstore"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// reserveNaive applies every delivery: each redelivery reserves the order again and
// announces it again. Correct only on a broker that delivers exactly once, which no
// broker does.
func (c *Consumer) reserveNaive(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	o, err := orderevent.OrderOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "ReserveStock "+string(c.strategy))
	defer span.End()
	if err := c.reserveInOwnTransaction(ctx, o); err != nil {
		return 0, err
	}
	if err := c.hooks.afterCommit(ctx); err != nil {
		return 0, err
	}
	return inbox.Processed, nil
}

// reserveCheckThenProcess is the usual first attempt: check, process, record, as three
// steps. It lets through a crash after the work commits and before the record (the
// failpoint inventory/after-commit sits there): the redelivery finds no record and
// reserves again; and two copies at once, which both check before either records.
// Recording first and working second turns the window round: a crash between them loses
// the reservation instead (at most once).
func (c *Consumer) reserveCheckThenProcess(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	o, err := orderevent.OrderOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := c.tracer.Start(ctx, "ReserveStock "+string(c.strategy))
	defer span.End()
	seen, err := wrongstore.New(c.pool).InboxHasMessage(ctx, wrongstore.InboxHasMessageParams{MessageID: env.UUID(), Consumer: stock.ConsumerName})
	if err != nil {
		return 0, fmt.Errorf("check inbox: %w", err)
	}
	if seen {
		return inbox.Duplicate, nil
	}
	if err := c.reserveInOwnTransaction(ctx, o); err != nil {
		return 0, err
	}
	// The reservation is committed and the message not yet recorded: the window.
	if err := c.hooks.afterCommit(ctx); err != nil {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		_, err := inbox.Claim(ctx, tx, stock.ConsumerName, env) // false: a concurrent copy recorded it first
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record message: %w", err)
	}
	return inbox.Processed, nil
}

// reserveInOwnTransaction reserves and announces in one transaction, as stock does, and
// without the natural key stock records the answer under: these consumers keep the
// outbox, what they lack is the dedup. With the key even they would be safe for this
// one message type; they do without it to show what a consumer meets when the work has
// no natural key, such as sending an email.
func (c *Consumer) reserveInOwnTransaction(ctx context.Context, o orderevent.Order) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := reserveAgain(ctx, tx, o); err != nil {
			return err
		}
		return c.hooks.beforeCommit(ctx)
	})
}

// reserveAgain decides on the locked books, reserves, and announces the answer as the
// next event of the order's reservation, every time it is called.
func reserveAgain(ctx context.Context, tx pgx.Tx, o orderevent.Order) error {
	a, err := lockAndDecide(ctx, tx, o)
	if err != nil {
		return err
	}
	// After the locks: a concurrent copy of this order has committed its event by now,
	// so the next number is free.
	sequence, err := wrongstore.New(tx).NextOutcomeSequence(ctx, o.ID.String())
	if err != nil {
		return fmt.Errorf("next outcome sequence: %w", err)
	}
	if a.reserved {
		if err := addReserved(ctx, store.New(tx), o); err != nil {
			return err
		}
	}
	return announce(ctx, tx, o, a, sequence)
}
