package wrongways

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
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// The work of a placement and of a cancellation as the wrong ways do it: the same rows
// and events as stock's, written plainly, without the row in order_answers that lets
// stock refuse a second answer to the same order. Stock keeps its own steps to itself;
// these are the wrong ways' copy, so that what stock exports is what its real callers
// need.

// reservationAggregate is the aggregate of inventory's events, as stock writes them: one
// order's reservation, identified by the order id.
const reservationAggregate = "reservation"

// answer is a wrong way's answer to one order: the copies reserved, or why not.
type answer struct {
	reserved bool
	reason   string // why it was rejected
}

// lockAndDecide locks the order's books in id order, as stock does, and answers the order
// from their free copies: the first line that cannot be served names the reason.
func lockAndDecide(ctx context.Context, tx pgx.Tx, o orderevent.Order) (answer, error) {
	lines := slices.SortedFunc(slices.Values(o.Lines), func(a, b contracts.Line) int { return bytes.Compare(a.BookID[:], b.BookID[:]) })
	ids := make([]uuid.UUID, len(lines))
	for i, l := range lines {
		ids[i] = l.BookID
	}
	q := store.New(tx)
	if _, err := q.LockBooks(ctx, ids); err != nil {
		return answer{}, fmt.Errorf("lock books: %w", err)
	}
	books, err := q.StockOf(ctx, ids)
	if err != nil {
		return answer{}, fmt.Errorf("read stock: %w", err)
	}
	free := make(map[uuid.UUID]int, len(books))
	for _, b := range books {
		free[b.ID] = int(b.OnHand - b.Reserved)
	}
	for _, l := range lines {
		available, ok := free[l.BookID]
		if !ok {
			return answer{reason: "unknown book " + l.BookID.String()}, nil
		}
		if available < l.Quantity {
			return answer{reason: fmt.Sprintf("insufficient stock for %s: %d available, %d wanted", l.BookID, available, l.Quantity)}, nil
		}
	}
	return answer{reserved: true}, nil
}

// addReserved adds the order's quantities to its books' reserved counts through q,
// whatever connection q was made on.
func addReserved(ctx context.Context, q *store.Queries, o orderevent.Order) error {
	ids, quantities := make([]uuid.UUID, len(o.Lines)), make([]int32, len(o.Lines))
	for i, l := range o.Lines {
		ids[i], quantities[i] = l.BookID, int32(l.Quantity)
	}
	if _, err := q.AddReserved(ctx, store.AddReservedParams{Ids: ids, Quantities: quantities}); err != nil {
		return fmt.Errorf("add reserved: %w", err)
	}
	return nil
}

// announce writes a's StockReserved or StockRejected to the outbox in tx, as event
// sequence of the order's reservation.
func announce(ctx context.Context, tx pgx.Tx, o orderevent.Order, a answer, sequence int64) error {
	e := outbox.Event{
		Source:        contracts.InventorySource,
		Type:          contracts.StockReserved,
		AggregateType: reservationAggregate,
		AggregateID:   o.ID.String(),
		Sequence:      sequence,
		Data:          contracts.StockReservedData{OrderID: o.ID, CustomerEmail: o.CustomerEmail, Lines: o.Lines},
	}
	if !a.reserved {
		e.Type = contracts.StockRejected
		e.Data = contracts.StockRejectedData{OrderID: o.ID, CustomerEmail: o.CustomerEmail, Lines: o.Lines, Reason: a.reason}
	}
	_, err := outbox.Write(ctx, tx, e)
	return err
}

// release is what one cancellation did to its order.
type release struct {
	stale    bool             // the order's row was at this sequence or past it: nothing done
	previous string           // the order's answer before: reserved, rejected, or "" for none yet
	lines    []contracts.Line // the copies given back
}

// cancel records the order's cancellation in order_answers by its sequence, as stock
// does, and gives back the copies reserved for it.
func cancel(ctx context.Context, tx pgx.Tx, cn orderevent.Cancellation) (release, error) {
	q := store.New(tx)
	row, err := q.RecordCancellation(ctx, store.RecordCancellationParams{OrderID: cn.OrderID, Sequence: cn.Sequence})
	if errors.Is(err, pgx.ErrNoRows) {
		return release{stale: true}, nil
	}
	if err != nil {
		return release{}, fmt.Errorf("record cancellation: %w", err)
	}
	r := release{previous: row.Outcome, lines: []contracts.Line{}}
	if row.FirstEvent {
		r.previous = ""
	}
	rows, err := q.DeleteReservations(ctx, cn.OrderID)
	if err != nil || len(rows) == 0 {
		return r, err
	}
	slices.SortFunc(rows, func(a, b store.DeleteReservationsRow) int { return bytes.Compare(a.BookID[:], b.BookID[:]) })
	ids, quantities := make([]uuid.UUID, len(rows)), make([]int32, len(rows))
	for i, l := range rows {
		ids[i], quantities[i] = l.BookID, -l.Quantity // given back
		r.lines = append(r.lines, contracts.Line{BookID: l.BookID, Quantity: int(l.Quantity)})
	}
	if _, err := q.LockBooks(ctx, ids); err != nil {
		return r, fmt.Errorf("lock books: %w", err)
	}
	if _, err := q.AddReserved(ctx, store.AddReservedParams{Ids: ids, Quantities: quantities}); err != nil {
		return r, fmt.Errorf("give back reserved: %w", err)
	}
	return r, nil
}

// announceRelease writes r's StockReleased to the outbox in tx, as event sequence of the
// order's reservation.
func announceRelease(ctx context.Context, tx pgx.Tx, cn orderevent.Cancellation, r release, sequence int64) error {
	_, err := outbox.Write(ctx, tx, outbox.Event{
		Source:        contracts.InventorySource,
		Type:          contracts.StockReleased,
		AggregateType: reservationAggregate,
		AggregateID:   cn.OrderID.String(),
		Sequence:      sequence,
		Data:          contracts.StockReleasedData{OrderID: cn.OrderID, CustomerEmail: cn.CustomerEmail, Lines: r.lines},
	})
	return err
}
