package stock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// Cancellation is what inventory needs of an OrderCancelled event.
type Cancellation struct {
	OrderID       uuid.UUID
	CustomerEmail string
	Sequence      int64
}

// CancellationOf reads and checks the cancellation an event carries. Every error is poison.
func CancellationOf(env event.Envelope) (Cancellation, error) {
	var d contracts.OrderCancelledData
	if err := env.DecodeData(&d); err != nil {
		return Cancellation{}, err
	}
	seq, err := strconv.ParseInt(env.Sequence, 10, 64)
	switch {
	case err != nil:
		return Cancellation{}, invalidData(env, "sequence %q", env.Sequence)
	case seq < 2:
		// The order's placement is its sequence 1; a cancellation comes after it.
		return Cancellation{}, invalidData(env, "sequence %d, a cancellation's is at least 2", seq)
	case d.OrderID == uuid.Nil:
		return Cancellation{}, invalidData(env, "order_id is missing")
	case d.OrderID.String() != env.Subject:
		return Cancellation{}, invalidData(env, "order_id %s does not match subject %q", d.OrderID, env.Subject)
	case contracts.AddressProblem(d.CustomerEmail) != "":
		// The rule of ordering's API, as an order's (checkOrder).
		return Cancellation{}, invalidData(env, "customer_email %s %s", event.Truncate(d.CustomerEmail), contracts.AddressProblem(d.CustomerEmail))
	}
	return Cancellation{OrderID: d.OrderID, CustomerEmail: d.CustomerEmail, Sequence: seq}, nil
}

// Release is what one cancellation did to its order.
type Release struct {
	Stale    bool             // the order's row was at this sequence or past it: nothing done
	Previous string           // the order's answer before: reserved, rejected, or "" for none yet
	Lines    []contracts.Line // the copies given back
}

// Outcome names the release in bookstore.inventory.orders.
func (r Release) Outcome() string {
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
//  2. Cancel: the order's row, decided by sequence, and its reserved copies given back.
//  3. StockReleased into the outbox: the lines given back, [] when there were none; the
//     reservation's first event when the cancellation came before its placement.
//  4. Commit. A crash before it (the failpoint inventory/before-release-commit) leaves
//     none of it and the redelivery starts afresh; a crash after it meets the inbox row.
func (s *Service) releaseStock(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	c, err := CancellationOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := s.tracer.Start(ctx, "ReleaseStock")
	defer span.End()
	var r Release
	processed, err := inbox.Process(ctx, s.pool, ConsumerName, env, func(tx pgx.Tx) error {
		var err error
		if r, err = Cancel(ctx, tx, c); err != nil {
			return err
		}
		if !r.Stale {
			if err := AnnounceRelease(ctx, tx, c, r, sequenceAfter(r.Previous)); err != nil {
				return err
			}
		}
		return failpoint.Inject(ctx, contracts.InventoryBeforeReleaseCommit)
	})
	if err != nil {
		return 0, err
	}
	if err := failpoint.Inject(ctx, contracts.InventoryAfterCommit); err != nil {
		return 0, err
	}
	if !processed {
		return inbox.Duplicate, nil
	}
	return s.released(ctx, env, c, r), nil
}

// released counts a claimed cancellation and says what the consumer reports: a stale one
// is a duplicate.
func (s *Service) released(ctx context.Context, env event.Envelope, c Cancellation, r Release) inbox.Outcome {
	s.Count(ctx, r.Outcome())
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

// Cancel records the order's cancellation in order_answers, decided by sequence
// (RecordCancellation), and gives back the copies reserved for it. No row yet means the
// cancellation overtook its placement, and the row it writes is the tombstone that makes
// the placement, when it comes, reserve nothing; a row at a lower sequence takes the
// cancellation; a row at its sequence or past it leaves everything as it is (Stale).
func Cancel(ctx context.Context, tx pgx.Tx, c Cancellation) (Release, error) {
	q := store.New(tx)
	row, err := q.RecordCancellation(ctx, store.RecordCancellationParams{OrderID: c.OrderID, Sequence: c.Sequence})
	if errors.Is(err, pgx.ErrNoRows) {
		return Release{Stale: true}, nil
	}
	if err != nil {
		return Release{}, fmt.Errorf("record cancellation: %w", err)
	}
	r := Release{Previous: row.Outcome, Lines: []contracts.Line{}}
	if row.FirstEvent {
		r.Previous = ""
	}
	r.Lines, err = giveBack(ctx, q, c.OrderID)
	return r, err
}

// giveBack deletes the order's reservations and takes their copies off books.reserved,
// the books locked in id order as Decide locks them.
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
		ids[i], quantities[i] = l.BookID, l.Quantity
		lines = append(lines, contracts.Line{BookID: l.BookID, Quantity: int(l.Quantity)})
	}
	if _, err := q.LockBooks(ctx, ids); err != nil {
		return nil, fmt.Errorf("lock books: %w", err)
	}
	if n, err := q.SubtractReserved(ctx, store.SubtractReservedParams{Ids: ids, Quantities: quantities}); err != nil {
		return nil, fmt.Errorf("subtract reserved: %w", err)
	} else if n != int64(len(ids)) {
		return nil, fmt.Errorf("order %s: released %d of %d books", orderID, n, len(ids))
	}
	return lines, nil
}

// AnnounceRelease writes r's StockReleased to the outbox in tx, as event sequence of the
// order's reservation.
func AnnounceRelease(ctx context.Context, tx pgx.Tx, c Cancellation, r Release, sequence int64) error {
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
