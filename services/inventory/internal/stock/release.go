package stock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// release is what one cancellation did to its order.
type release struct {
	Stale    bool             // the order's row was at this sequence or past it: nothing done
	Previous string           // the order's answer before: reserved, rejected, or "" for none yet
	Lines    []contracts.Line // the copies given back
}

// Outcome names the release in bookstore.inventory.orders.
func (r release) Outcome() string {
	switch {
	case r.Stale:
		return "cancellation-stale"
	case r.Previous == "":
		return "cancelled-before-placed"
	}
	return "released"
}

// releaseStock applies an order's cancellation in the inbox's transaction:
//  1. The inbox row, as for every message.
//  2. cancel: the order's row, decided by sequence, and its reserved copies given back.
//  3. StockReleased into the outbox: the lines given back, [] when there were none; the
//     reservation's first event when the cancellation came before its placement.
//  4. Commit. A crash before it (the failpoint inventory/before-release-commit) leaves
//     none of it and the redelivery starts afresh; a crash after it meets the inbox row.
func (s *Service) releaseStock(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	c, err := orderevent.CancellationOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := s.tracer.Start(ctx, "ReleaseStock")
	defer span.End()
	var r release
	processed, err := inbox.Process(ctx, s.pool, ConsumerName, env, func(tx pgx.Tx) error {
		var err error
		if r, err = cancel(ctx, tx, c); err != nil {
			return err
		}
		if !r.Stale {
			if err := announceRelease(ctx, tx, c, r, sequenceAfter(r.Previous)); err != nil {
				return err
			}
		}
		return failpoint.Inject(ctx, contracts.InventoryBeforeReleaseCommit)
	})
	outcome, err := inbox.Settle(ctx, processed, err, afterCommit)
	if err != nil || outcome == inbox.Duplicate {
		return outcome, err
	}
	return s.released(ctx, env, c, r), nil
}

// released counts a claimed cancellation and says what the consumer reports: a stale one
// is a duplicate.
func (s *Service) released(ctx context.Context, env event.Envelope, c orderevent.Cancellation, r release) inbox.Outcome {
	s.count(ctx, r.Outcome())
	if r.Stale {
		s.log.WarnContext(ctx, "cancellation at or below the order's last sequence; nothing done",
			"order_id", c.OrderID, "sequence", c.Sequence, "message_id", env.ID)
		return inbox.Duplicate
	}
	return inbox.Processed
}

// sequenceAfter is StockReleased's place in the order's reservation: after its outcome
// (1), or first when the cancellation came before the placement.
func sequenceAfter(previous string) int64 {
	if previous == "" {
		return 1
	}
	return 2
}

// cancel records the order's cancellation in order_answers, decided by sequence
// (RecordCancellation), and gives back the copies reserved for it. No row yet means the
// cancellation overtook its placement, and the row it writes is the tombstone that makes
// the placement, when it comes, reserve nothing; a row at a lower sequence takes the
// cancellation; a row at its sequence or past it leaves everything as it is (Stale).
func cancel(ctx context.Context, tx pgx.Tx, c orderevent.Cancellation) (release, error) {
	q := store.New(tx)
	row, err := q.RecordCancellation(ctx, store.RecordCancellationParams{OrderID: c.OrderID, Sequence: c.Sequence})
	if errors.Is(err, pgx.ErrNoRows) {
		return release{Stale: true}, nil
	}
	if err != nil {
		return release{}, fmt.Errorf("record cancellation: %w", err)
	}
	r := release{Previous: row.Outcome, Lines: []contracts.Line{}}
	if row.FirstEvent {
		r.Previous = ""
	}
	r.Lines, err = giveBack(ctx, q, c.OrderID)
	return r, err
}

// giveBack deletes the order's reservations and takes their copies off the books' reserved
// counts, the books locked in id order as lockAndDecide locks them.
func giveBack(ctx context.Context, q *store.Queries, orderID uuid.UUID) ([]contracts.Line, error) {
	rows, err := q.DeleteReservations(ctx, orderID)
	if err != nil {
		return nil, fmt.Errorf("delete reservations: %w", err)
	}
	lines := []contracts.Line{}
	if len(rows) == 0 {
		return lines, nil
	}
	slices.SortFunc(rows, func(a, b store.DeleteReservationsRow) int { return bytes.Compare(a.BookID[:], b.BookID[:]) })
	ids, quantities := make([]uuid.UUID, len(rows)), make([]int32, len(rows))
	for i, l := range rows {
		ids[i], quantities[i] = l.BookID, -l.Quantity // given back
		lines = append(lines, contracts.Line{BookID: l.BookID, Quantity: int(l.Quantity)})
	}
	if _, err := q.LockBooks(ctx, ids); err != nil {
		return nil, fmt.Errorf("lock books: %w", err)
	}
	if n, err := q.AddReserved(ctx, store.AddReservedParams{Ids: ids, Quantities: quantities}); err != nil {
		return nil, fmt.Errorf("give back reserved: %w", err)
	} else if n != int64(len(ids)) {
		return nil, fmt.Errorf("order %s: released %d of %d books", orderID, n, len(ids))
	}
	return lines, nil
}

// announceRelease writes r's StockReleased to the outbox in tx, as event sequence of the
// order's reservation.
func announceRelease(ctx context.Context, tx pgx.Tx, c orderevent.Cancellation, r release, sequence int64) error {
	_, err := outbox.Write(ctx, tx, outbox.Event{
		Source:        Source,
		Type:          contracts.StockReleased,
		AggregateType: AggregateType,
		AggregateID:   c.OrderID.String(),
		Sequence:      sequence,
		Data:          contracts.StockReleasedData{OrderID: c.OrderID, CustomerEmail: c.CustomerEmail, Lines: r.Lines},
	})
	return err
}
