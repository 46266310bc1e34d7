package stock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// HandleOrderEvent is the consumer's handler for inventory.order-placed: an order's
// placement reserves (ReserveStock), its cancellation releases (ReleaseStock). The two
// arrive on one queue, in any order and on any worker; docs/cancellation.md says why
// the outcome is the same whichever is applied first.
func (s *Service) HandleOrderEvent(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	if env.Type == contracts.OrderCancelled {
		return s.ReleaseStock(ctx, env)
	}
	return s.ReserveStock(ctx, env)
}

// cancellation is what inventory needs of an OrderCancelled event.
type cancellation struct {
	OrderID       uuid.UUID
	CustomerEmail string
	Sequence      int64
}

func cancellationOf(env event.Envelope) (cancellation, error) {
	var d contracts.OrderCancelledData
	if err := env.DecodeData(&d); err != nil {
		return cancellation{}, err
	}
	seq, err := strconv.ParseInt(env.Sequence, 10, 64)
	switch {
	case err != nil:
		return cancellation{}, invalidData(env, "sequence %q", env.Sequence)
	case seq < 2:
		// The order's placement is its sequence 1; a cancellation comes after it.
		return cancellation{}, invalidData(env, "sequence %d, a cancellation's is at least 2", seq)
	case d.OrderID == uuid.Nil:
		return cancellation{}, invalidData(env, "order_id is missing")
	case d.OrderID.String() != env.Subject:
		return cancellation{}, invalidData(env, "order_id %s does not match subject %q", d.OrderID, env.Subject)
	case d.CustomerEmail == "" || strings.ContainsRune(d.CustomerEmail, 0):
		return cancellation{}, invalidData(env, "customer_email %q", d.CustomerEmail)
	}
	return cancellation{OrderID: d.OrderID, CustomerEmail: d.CustomerEmail, Sequence: seq}, nil
}

// release is what ReleaseStock did for one cancellation.
type release struct {
	stale    bool             // the order's row was at this sequence or past it: nothing done
	previous string           // the order's answer before: reserved, rejected, or "" for none yet
	lines    []contracts.Line // the copies given back
}

func (r release) outcome() string {
	switch {
	case r.stale:
		return "cancellation-stale"
	case r.previous == "":
		return "cancelled-before-placed"
	}
	return "released"
}

// ReleaseStock applies an order's cancellation in the inbox's transaction:
//  1. The inbox row, as for every message.
//  2. The order's row in order_answers, decided by sequence (RecordCancellation): none
//     yet means the cancellation overtook its placement, and the row it writes is the
//     tombstone that makes the placement, when it comes, reserve nothing; a row at a
//     lower sequence takes the cancellation; a row at its sequence or past it (the same
//     cancellation under another message id) leaves everything as it is.
//  3. The order's reservations deleted and their copies taken off books.reserved, the
//     books locked in id order as reserve locks them.
//  4. StockReleased into the outbox: the lines given back, [] when there were none.
//  5. Commit. A crash before it (the failpoint inventory/before-release-commit) leaves
//     none of it and the redelivery starts afresh; a crash after it meets the inbox row.
//
// Every strategy releases this way: the strategies show what goes wrong with duplicate
// placements, and a cancellation is not one of their demonstrations.
func (s *Service) ReleaseStock(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	c, err := cancellationOf(env)
	if err != nil {
		return 0, err
	}
	ctx, span := s.tracer.Start(ctx, "ReleaseStock")
	defer span.End()
	var r release
	processed, err := inbox.Process(ctx, s.pool, ConsumerName, env, func(tx pgx.Tx) error {
		var err error
		if r, err = releaseOrder(ctx, tx, c, s.ignoreSeq); err != nil {
			return err
		}
		return failpoint.Inject(ctx, contracts.InventoryBeforeReleaseCommit)
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
	s.count(ctx, r.outcome())
	if r.stale {
		s.log.WarnContext(ctx, "cancellation at or below the order's last sequence; nothing done",
			"order_id", c.OrderID, "sequence", c.Sequence, "message_id", env.ID)
		return inbox.Duplicate, nil
	}
	return inbox.Processed, nil
}

// releaseOrder does the work of ReleaseStock in tx.
func releaseOrder(ctx context.Context, tx pgx.Tx, c cancellation, ignoreSequence bool) (release, error) {
	q := store.New(tx)
	row, err := q.RecordCancellation(ctx, store.RecordCancellationParams{OrderID: c.OrderID, Sequence: c.Sequence})
	if errors.Is(err, pgx.ErrNoRows) {
		return release{stale: true}, nil
	}
	if err != nil {
		return release{}, fmt.Errorf("record cancellation: %w", err)
	}
	r := release{previous: row.Outcome, lines: []contracts.Line{}}
	if row.FirstEvent {
		r.previous = ""
		if ignoreSequence {
			// The wrong way: nothing to release, so nothing remembered. The placement that
			// comes later finds no row and reserves for a cancelled order.
			if err := q.ForgetOrderAnswer(ctx, c.OrderID); err != nil {
				return r, fmt.Errorf("forget order answer: %w", err)
			}
		}
	}
	rows, err := q.DeleteReservations(ctx, c.OrderID)
	if err != nil {
		return r, fmt.Errorf("delete reservations: %w", err)
	}
	if len(rows) > 0 {
		slices.SortFunc(rows, func(a, b store.DeleteReservationsRow) int { return bytes.Compare(a.BookID[:], b.BookID[:]) })
		ids, quantities := make([]uuid.UUID, len(rows)), make([]int32, len(rows))
		for i, l := range rows {
			ids[i], quantities[i] = l.BookID, l.Quantity
			r.lines = append(r.lines, contracts.Line{BookID: l.BookID, Quantity: int(l.Quantity)})
		}
		if _, err := q.LockBooks(ctx, ids); err != nil {
			return r, fmt.Errorf("lock books: %w", err)
		}
		if n, err := q.SubtractReserved(ctx, store.SubtractReservedParams{Ids: ids, Quantities: quantities}); err != nil {
			return r, fmt.Errorf("subtract reserved: %w", err)
		} else if n != int64(len(ids)) {
			return r, fmt.Errorf("order %s: released %d of %d books", c.OrderID, n, len(ids))
		}
	}
	// The reservation aggregate's next event: after its outcome (1), or its first when
	// the cancellation came first.
	sequence := int64(2)
	if r.previous == "" && !ignoreSequence {
		sequence = 1
	}
	_, err = outbox.Write(ctx, tx, outbox.Event{
		Source:        Source,
		Type:          contracts.StockReleased,
		AggregateType: AggregateType,
		AggregateID:   c.OrderID.String(),
		Sequence:      sequence,
		Data:          contracts.StockReleasedData{OrderID: c.OrderID, CustomerEmail: c.CustomerEmail, Lines: r.lines},
	})
	return r, err
}
