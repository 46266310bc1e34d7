package stock

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// ReserveStock is the consumer's handler for ordering.order-placed, v1 and v2 (orderOf
// reads either into one order). It reserves every
// line of the order or none, and announces which through the outbox. An event it cannot
// read is poison; a book it does not know rejects the order (a catalogue question, not a
// broken message).
func (s *Service) ReserveStock(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	order, err := orderOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := s.tracer.Start(ctx, "ReserveStock "+string(s.strategy))
	defer span.End()
	switch s.strategy {
	case CheckThenProcess:
		return s.reserveCheckThenProcess(ctx, env, order)
	case Naive:
		return s.reserveNaive(ctx, env, order)
	default:
		return s.reserveWithInbox(ctx, env, order)
	}
}

// decision is inventory's answer to one order.
type decision struct {
	reserved bool
	reason   string // why it was rejected
	// alreadyAnswered: this order was answered before under another message id (the
	// order_answers table holds it). Nothing was changed and nothing is announced.
	alreadyAnswered bool
	// cancelledFirst: the order's cancellation was applied before its placement arrived
	// (order_answers holds its tombstone, at a sequence above the placement's). Nothing
	// is reserved and nothing is announced: the cancellation's StockReleased, with no
	// lines, was the order's answer.
	cancelledFirst bool
}

func (d decision) outcome() string {
	switch {
	case d.cancelledFirst:
		return "placed-after-cancellation"
	case d.alreadyAnswered:
		return "already-answered"
	case d.reserved:
		return "reserved"
	}
	return "rejected"
}

// keying is how reserve recognises an order it has answered before.
type keying int

const (
	// byReservationKey: the order_answers table's primary key refuses a second answer to
	// the same order, the reservations table's (order id, book id) a second reservation,
	// and the order has exactly one outcome event (sequence 1). The inbox strategy uses
	// these natural keys behind the inbox row.
	byReservationKey keying = iota + 1
	// notAtAll: write the difference and announce it, every time. The wrong strategies
	// use it. With byReservationKey even they would be safe for this one message type
	// (natural idempotency, the first thing to reach for); they do without it to show
	// what a consumer meets when the work has no natural key, such as sending an email.
	notAtAll
)

// reserve does the work of one order inside tx: lock its books, decide, reserve all lines
// or none, and write the outcome event to the outbox, so that the stock change and its
// announcement commit together or not at all.
func reserve(ctx context.Context, tx pgx.Tx, o order, key keying) (decision, error) {
	q := store.New(tx)
	lines := byBook(o.Lines)
	ids, quantities := make([]uuid.UUID, len(lines)), make([]int32, len(lines))
	for i, l := range lines {
		ids[i], quantities[i] = l.BookID, int32(l.Quantity)
	}

	// Locks first, in book id order (the query sorts; see LockBooks), then the decision on
	// the locked rows: no other order can take the copies between our check and our update.
	books, err := q.LockBooks(ctx, ids)
	if err != nil {
		return decision{}, fmt.Errorf("lock books: %w", err)
	}
	d := decide(lines, availableOf(books))
	if key == byReservationKey {
		n, err := q.RecordAnswer(ctx, store.RecordAnswerParams{OrderID: o.ID, Outcome: d.outcome()})
		if err != nil {
			return d, fmt.Errorf("record answer: %w", err)
		}
		if n == 0 {
			// The placement is its order's sequence 1, and every row of order_answers is at
			// 1 or above: a placement is never newer than what the row holds. Which event
			// wrote the row says what to report.
			prev, err := q.GetOrderAnswer(ctx, o.ID)
			if err != nil {
				return d, fmt.Errorf("get order answer: %w", err)
			}
			return decision{alreadyAnswered: true, cancelledFirst: prev.Outcome == "cancelled"}, nil
		}
	}

	sequence := int64(1)
	if key == notAtAll {
		// After the locks: a concurrent copy of this order has committed its event by now,
		// so the next number is free.
		if sequence, err = q.NextOutcomeSequence(ctx, o.ID.String()); err != nil {
			return d, fmt.Errorf("next outcome sequence: %w", err)
		}
	}

	if d.reserved {
		if key == byReservationKey {
			n, err := q.InsertReservations(ctx, store.InsertReservationsParams{OrderID: o.ID, Ids: ids, Quantities: quantities})
			if err != nil {
				return d, fmt.Errorf("insert reservations: %w", err)
			}
			if n == 0 {
				return decision{alreadyAnswered: true}, nil
			}
			if n != int64(len(lines)) {
				// The lines of an order are inserted together, so either all are there or none.
				return d, fmt.Errorf("order %s: %d of %d lines were already reserved", o.ID, int64(len(lines))-n, len(lines))
			}
		}
		n, err := q.AddReserved(ctx, store.AddReservedParams{Ids: ids, Quantities: quantities})
		if err != nil {
			return d, fmt.Errorf("add reserved: %w", err)
		}
		if n != int64(len(lines)) {
			return d, fmt.Errorf("order %s: reserved %d of %d books", o.ID, n, len(lines))
		}
	}
	if _, err := outbox.Write(ctx, tx, outcomeEvent(o, d, sequence)); err != nil {
		return d, err
	}
	return d, nil
}

// byBook is the lines sorted by book id: the order in which reserve locks and decides.
func byBook(lines []contracts.Line) []contracts.Line {
	lines = slices.Clone(lines)
	slices.SortFunc(lines, func(a, b contracts.Line) int { return cmp.Compare(a.BookID.String(), b.BookID.String()) })
	return lines
}

// availableOf is how many copies of each locked book are free to reserve.
func availableOf(books []store.LockBooksRow) map[uuid.UUID]int {
	free := make(map[uuid.UUID]int, len(books))
	for _, b := range books {
		free[b.ID] = int(b.OnHand - b.Reserved)
	}
	return free
}

// decide answers an order from the free copies of its books. The first line, in book id
// order, that cannot be served names the reason.
func decide(lines []contracts.Line, free map[uuid.UUID]int) decision {
	for _, l := range lines {
		available, ok := free[l.BookID]
		if !ok {
			return decision{reason: "unknown book " + l.BookID.String()}
		}
		if available < l.Quantity {
			return decision{reason: fmt.Sprintf("insufficient stock for %s: %d available, %d wanted", l.BookID, available, l.Quantity)}
		}
	}
	return decision{reserved: true}
}

// outcomeEvent is the event that announces d: StockReserved or StockRejected, about the
// order's reservation, carrying the order's lines as the order listed them.
func outcomeEvent(o order, d decision, sequence int64) outbox.Event {
	e := outbox.Event{
		Source:        Source,
		AggregateType: AggregateType,
		AggregateID:   o.ID.String(),
		Sequence:      sequence,
	}
	if d.reserved {
		e.Type = contracts.StockReserved
		e.Data = contracts.StockReservedData{OrderID: o.ID, CustomerEmail: o.CustomerEmail, Lines: o.Lines}
	} else {
		e.Type = contracts.StockRejected
		e.Data = contracts.StockRejectedData{OrderID: o.ID, CustomerEmail: o.CustomerEmail, Lines: o.Lines, Reason: d.reason}
	}
	return e
}
