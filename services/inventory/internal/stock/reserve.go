package stock

import (
	"cmp"
	"context"
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

// HandleOrderEvent is the consumer's handler for inventory.order-placed: a placement,
// v1 or v2, reserves every line of its order or none and announces which through the
// outbox; a cancellation releases (releaseStock). Both arrive on one queue, in any order
// and on any worker; docs/cancellation.md says why the outcome is the same either way.
//
// A placement is one transaction whose first statement claims the message's inbox row,
// so the primary key decides between two copies before either touches a book: a second
// copy waits for the first, then skips if it committed or does the work if it rolled
// back. A crash before the commit leaves nothing; one after it meets the inbox row.
func (s *Service) HandleOrderEvent(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	if env.Type == contracts.OrderCancelled {
		return s.releaseStock(ctx, env)
	}
	o, err := orderevent.OrderOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := s.tracer.Start(ctx, "ReserveStock inbox")
	defer span.End()
	var d decision
	processed, err := inbox.Process(ctx, s.pool, ConsumerName, env, func(tx pgx.Tx) error {
		var err error
		if d, err = reserve(ctx, tx, o); err != nil {
			return err
		}
		return failpoint.Inject(ctx, contracts.InventoryBeforeCommit)
	})
	outcome, err := inbox.Settle(ctx, processed, err, afterCommit)
	if err != nil || outcome == inbox.Duplicate {
		return outcome, err
	}
	return s.answered(ctx, env, o, d), nil
}

// afterCommit is the step between a message's commit and its ack, where the failpoint
// inventory/after-commit crashes the process.
func afterCommit(ctx context.Context) error {
	return failpoint.Inject(ctx, contracts.InventoryAfterCommit)
}

// answered counts the answer to a claimed placement and says what the consumer reports:
// an order answered before, under another message id or by its cancellation, is a
// duplicate.
func (s *Service) answered(ctx context.Context, env event.Envelope, o orderevent.Order, d decision) inbox.Outcome {
	s.count(ctx, d.Outcome())
	switch {
	case d.cancelledFirst:
		s.log.InfoContext(ctx, "order cancelled before its placement arrived; nothing reserved",
			"order_id", o.ID, "message_id", env.ID)
		return inbox.Duplicate
	case d.alreadyAnswered:
		s.log.WarnContext(ctx, "order already answered under another message id; nothing done",
			"order_id", o.ID, "message_id", env.ID)
		return inbox.Duplicate
	}
	return inbox.Processed
}

// reserve does the work of one placement inside tx: decide on the locked books, record the
// answer, reserve all lines or none, and write the outcome event to the outbox, so that
// the stock change and its announcement commit together or not at all. The order's row
// in order_answers and the reservations' keys refuse a second answer to the same order
// under another message id, which the inbox cannot see.
func reserve(ctx context.Context, tx pgx.Tx, o orderevent.Order) (decision, error) {
	d, err := lockAndDecide(ctx, tx, o)
	if err != nil {
		return d, err
	}
	if d, err = recordAnswer(ctx, tx, o, d); err != nil || d.alreadyAnswered {
		return d, err
	}
	if d.Reserved {
		n, err := insertReservations(ctx, tx, o)
		if err != nil {
			return d, err
		}
		if n == 0 {
			return decision{alreadyAnswered: true}, nil
		}
		if err := addReserved(ctx, tx, o); err != nil {
			return d, err
		}
	}
	return d, announce(ctx, tx, o, d, 1)
}

// decision is inventory's answer to one order.
type decision struct {
	Reserved bool
	reason   string // why it was rejected
	// alreadyAnswered: this order was answered before under another message id (the
	// order_answers table holds it). Nothing was changed and nothing is announced.
	alreadyAnswered bool
	// cancelledFirst: the order's cancellation was applied before its placement arrived
	// (order_answers holds its tombstone); its StockReleased, with no lines, was the answer.
	cancelledFirst bool
}

// Outcome names the decision in order_answers and in bookstore.inventory.orders.
func (d decision) Outcome() string {
	switch {
	case d.cancelledFirst:
		return "placed-after-cancellation"
	case d.alreadyAnswered:
		return "already-answered"
	case d.Reserved:
		return "reserved"
	}
	return "rejected"
}

// lockAndDecide locks the order's books and answers the order from their free copies. The locks
// come first, in book id order (the query sorts; see LockBooks): no other order can take
// the copies between this answer and the commit.
func lockAndDecide(ctx context.Context, tx pgx.Tx, o orderevent.Order) (decision, error) {
	lines := byBook(o.Lines)
	ids, _ := columns(lines)
	free, err := lockStock(ctx, store.New(tx), ids)
	if err != nil {
		return decision{}, err
	}
	return decide(lines, free), nil
}

// lockStock locks the books (LockBooks) and then reads how many copies of each are free to
// reserve. Two statements, in this order: the second's snapshot is taken once the locks
// are held, so it sees the stock the last holder committed.
func lockStock(ctx context.Context, q *store.Queries, ids []uuid.UUID) (map[uuid.UUID]int, error) {
	if _, err := q.LockBooks(ctx, ids); err != nil {
		return nil, fmt.Errorf("lock books: %w", err)
	}
	stock, err := q.StockOf(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read stock: %w", err)
	}
	free := make(map[uuid.UUID]int, len(stock))
	for _, b := range stock {
		free[b.ID] = int(b.OnHand - b.Reserved)
	}
	return free, nil
}

// recordAnswer writes the order's row in order_answers. An existing row means the order
// was answered before: a placement is its order's sequence 1 and every row is at 1 or
// above, so it is never newer; which event wrote the row says what to report.
func recordAnswer(ctx context.Context, tx pgx.Tx, o orderevent.Order, d decision) (decision, error) {
	q := store.New(tx)
	n, err := q.RecordAnswer(ctx, store.RecordAnswerParams{OrderID: o.ID, Outcome: d.Outcome()})
	if err != nil {
		return d, fmt.Errorf("record answer: %w", err)
	}
	if n > 0 {
		return d, nil
	}
	prev, err := q.GetOrderAnswer(ctx, o.ID)
	if err != nil {
		return d, fmt.Errorf("get order answer: %w", err)
	}
	return decision{alreadyAnswered: true, cancelledFirst: prev.Outcome == "cancelled"}, nil
}

// insertReservations writes one row per line of the order and returns how many it wrote:
// every line, or none when the order's lines were there already. The lines of an order
// are inserted together, so a part is an error.
func insertReservations(ctx context.Context, tx pgx.Tx, o orderevent.Order) (int64, error) {
	ids, quantities := columns(byBook(o.Lines))
	n, err := store.New(tx).InsertReservations(ctx, store.InsertReservationsParams{OrderID: o.ID, Ids: ids, Quantities: quantities})
	if err != nil {
		return 0, fmt.Errorf("insert reservations: %w", err)
	}
	if n != 0 && n != int64(len(ids)) {
		return n, fmt.Errorf("order %s: %d of %d lines were already reserved", o.ID, int64(len(ids))-n, len(ids))
	}
	return n, nil
}

// addReserved adds the order's quantities to its books' reserved counts. The books must be
// locked in tx (lockAndDecide).
func addReserved(ctx context.Context, tx pgx.Tx, o orderevent.Order) error {
	ids, quantities := columns(byBook(o.Lines))
	n, err := store.New(tx).AddReserved(ctx, store.AddReservedParams{Ids: ids, Quantities: quantities})
	if err != nil {
		return fmt.Errorf("add reserved: %w", err)
	}
	if n != int64(len(ids)) {
		return fmt.Errorf("order %s: reserved %d of %d books", o.ID, n, len(ids))
	}
	return nil
}

// announce writes the outcome event of d to the outbox in tx, as event sequence of the
// order's reservation.
func announce(ctx context.Context, tx pgx.Tx, o orderevent.Order, d decision, sequence int64) error {
	_, err := outbox.Write(ctx, tx, outcomeEvent(o, d, sequence))
	return err
}

// byBook is the lines sorted by book id: the order in which reserve locks and decides.
func byBook(lines []contracts.Line) []contracts.Line {
	lines = slices.Clone(lines)
	slices.SortFunc(lines, func(a, b contracts.Line) int { return cmp.Compare(a.BookID.String(), b.BookID.String()) })
	return lines
}

// columns is the lines as the queries take them: book ids and quantities side by side.
func columns(lines []contracts.Line) ([]uuid.UUID, []int32) {
	ids, quantities := make([]uuid.UUID, len(lines)), make([]int32, len(lines))
	for i, l := range lines {
		ids[i], quantities[i] = l.BookID, int32(l.Quantity)
	}
	return ids, quantities
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
	return decision{Reserved: true}
}

// outcomeEvent is the event that announces d: StockReserved or StockRejected, about the
// order's reservation, carrying the order's lines as the order listed them.
func outcomeEvent(o orderevent.Order, d decision, sequence int64) outbox.Event {
	e := outbox.Event{
		Source:        Source,
		AggregateType: AggregateType,
		AggregateID:   o.ID.String(),
		Sequence:      sequence,
	}
	if d.Reserved {
		e.Type = contracts.StockReserved
		e.Data = contracts.StockReservedData{OrderID: o.ID, CustomerEmail: o.CustomerEmail, Lines: o.Lines}
	} else {
		e.Type = contracts.StockRejected
		e.Data = contracts.StockRejectedData{OrderID: o.ID, CustomerEmail: o.CustomerEmail, Lines: o.Lines, Reason: d.reason}
	}
	return e
}
