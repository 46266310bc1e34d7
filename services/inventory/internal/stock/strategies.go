package stock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// The three strategies differ only in how they keep a message from being applied twice;
// the work (reserve) is the same. docs/idempotent-consumer.md walks through them.

// reserveWithInbox is the right way, and the default. The order of statements is the
// point:
//  1. Insert the inbox row (message id, consumer): the first statement, so the primary key
//     decides between two copies before either touches a book. A second copy's insert
//     waits here for the first transaction: it skips if that commits, and does the work if
//     that rolls back.
//  2. Lock the books in id order, decide, record the reservations, add to reserved, write
//     the outcome event to the outbox.
//  3. Commit. A crash before this leaves none of it, and the redelivery starts afresh; a
//     crash after it (before the ack) meets the inbox row on redelivery: a duplicate.
func (s *Service) reserveWithInbox(ctx context.Context, env event.Envelope, o order) (inbox.Outcome, error) {
	var d decision
	processed, err := inbox.Process(ctx, s.pool, ConsumerName, env, func(tx pgx.Tx) error {
		var err error
		if d, err = reserve(ctx, tx, o, byReservationKey); err != nil {
			return err
		}
		return s.hooks.beforeCommit(ctx)
	})
	if err != nil {
		return 0, err
	}
	if err := s.hooks.afterCommit(ctx); err != nil {
		return 0, err
	}
	if !processed {
		return inbox.Duplicate, nil
	}
	s.count(ctx, d.outcome())
	if d.cancelledFirst {
		s.log.InfoContext(ctx, "order cancelled before its placement arrived; nothing reserved",
			"order_id", o.ID, "message_id", env.ID)
		return inbox.Duplicate, nil
	}
	if d.alreadyAnswered {
		s.log.WarnContext(ctx, "order already answered under another message id; nothing done",
			"order_id", o.ID, "message_id", env.ID)
		return inbox.Duplicate, nil
	}
	return inbox.Processed, nil
}

// reserveCheckThenProcess is the usual first attempt, and wrong: check, process, record,
// as three steps. It lets through
//   - a crash after the work commits and before the record (the failpoint
//     inventory/after-commit sits exactly there): the redelivery finds no record and
//     reserves again;
//   - two copies at once: both check before either records, and both reserve.
//
// Recording first and working second does not close the window, it turns it round: a
// crash between them loses the reservation instead (at most once).
func (s *Service) reserveCheckThenProcess(ctx context.Context, env event.Envelope, o order) (inbox.Outcome, error) {
	seen, err := store.New(s.pool).InboxHasMessage(ctx, store.InboxHasMessageParams{MessageID: env.UUID(), Consumer: ConsumerName})
	if err != nil {
		return 0, fmt.Errorf("check inbox: %w", err)
	}
	if seen {
		return inbox.Duplicate, nil
	}
	d, err := s.reserveInOwnTransaction(ctx, o)
	if err != nil {
		return 0, err
	}
	// The reservation is committed and the message not yet recorded: the window.
	if err := s.hooks.afterCommit(ctx); err != nil {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := inbox.Claim(ctx, tx, ConsumerName, env) // false: a concurrent copy recorded it first
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record message: %w", err)
	}
	s.count(ctx, d.outcome())
	return inbox.Processed, nil
}

// reserveNaive applies every delivery: each redelivery reserves the order again and
// announces it again. Correct only on a broker that delivers exactly once, which no
// broker does.
func (s *Service) reserveNaive(ctx context.Context, _ event.Envelope, o order) (inbox.Outcome, error) {
	d, err := s.reserveInOwnTransaction(ctx, o)
	if err != nil {
		return 0, err
	}
	if err := s.hooks.afterCommit(ctx); err != nil {
		return 0, err
	}
	s.count(ctx, d.outcome())
	return inbox.Processed, nil
}

// reserveInOwnTransaction is the work of the wrong strategies: reserve and announce in one
// transaction (they keep the outbox; what they lack is the dedup).
func (s *Service) reserveInOwnTransaction(ctx context.Context, o order) (decision, error) {
	var d decision
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if d, err = reserve(ctx, tx, o, notAtAll); err != nil {
			return err
		}
		return s.hooks.beforeCommit(ctx)
	})
	return d, err
}
