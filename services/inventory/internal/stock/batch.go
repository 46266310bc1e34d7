package stock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// errAnsweredBefore: an order of the batch was answered before, under another message
// id. The batch rolls back and its orders are handled one at a time, where reserve
// tells that order apart.
var errAnsweredBefore = errors.New("an order of the batch was answered before")

// errCancellationInBatch: a batch holds a cancellation, which is applied alone, as is
// every message of its batch.
var errCancellationInBatch = errors.New("a cancellation is applied alone")

// HandleOrderEvents is HandleOrderEvent for placements that arrived together: one
// transaction, one inbox claim, one lock of every book, one statement per table, with
// the decisions reserve would make one order after another. Anything unusual rolls the
// batch back, and the consumer hands each message to HandleOrderEvent alone.
// docs/performance.md says why this form exists and what it saves.
func (s *Service) HandleOrderEvents(ctx context.Context, msgs []inbox.Message) ([]inbox.Outcome, error) {
	envs := make([]event.Envelope, len(msgs))
	orders := make([]orderevent.Order, len(msgs))
	causes := make([]trace.SpanContext, len(msgs))
	for i, m := range msgs {
		if m.Envelope.Type == contracts.OrderCancelled {
			return nil, errCancellationInBatch
		}
		o, err := orderevent.OrderOf(m.Envelope)
		if err != nil {
			return nil, err
		}
		envs[i], orders[i], causes[i] = m.Envelope, o, m.Span
	}
	ctx, span := s.tracer.Start(ctx, "ReserveStockBatch", trace.WithAttributes(attribute.Int("bookstore.orders", len(orders))))
	defer span.End()

	var decisions []decision
	err := inbox.ProcessAll(ctx, s.pool, ConsumerName, envs, func(tx pgx.Tx) error {
		var err error
		if decisions, err = reserveAll(ctx, tx, orders, causes); err != nil {
			return err
		}
		return failpoint.Inject(ctx, contracts.InventoryBeforeCommit)
	})
	if err != nil {
		return nil, err
	}
	if err := failpoint.Inject(ctx, contracts.InventoryAfterCommit); err != nil {
		return nil, err
	}
	for _, d := range decisions {
		s.count(ctx, d.Outcome())
	}
	return slices.Repeat([]inbox.Outcome{inbox.Processed}, len(msgs)), nil
}

// reserveAll is reserve for several orders in one transaction. Every book of the batch
// is locked in one statement, in id order like reserve's locks, so two batches cannot
// deadlock on each other or on a single order. Each order is then decided against the
// copies left by the orders before it.
func reserveAll(ctx context.Context, tx pgx.Tx, orders []orderevent.Order, causes []trace.SpanContext) ([]decision, error) {
	q := store.New(tx)
	free, err := lockStock(ctx, q, bookIDs(orders))
	if err != nil {
		return nil, err
	}

	decisions := make([]decision, len(orders))
	events := make([]outbox.Event, len(orders))
	answers := store.RecordAnswersParams{}
	lines := store.InsertReservationsOfOrdersParams{}
	taken := map[uuid.UUID]int32{}
	for i, o := range orders {
		d := decide(byBook(o.Lines), free)
		if d.Reserved {
			for _, l := range o.Lines {
				free[l.BookID] -= l.Quantity
				taken[l.BookID] += int32(l.Quantity)
				lines.OrderIds = append(lines.OrderIds, o.ID)
				lines.BookIds = append(lines.BookIds, l.BookID)
				lines.Quantities = append(lines.Quantities, int32(l.Quantity))
			}
		}
		answers.OrderIds = append(answers.OrderIds, o.ID)
		answers.Outcomes = append(answers.Outcomes, d.Outcome())
		decisions[i] = d
		events[i] = outcomeEvent(o, d, 1)
		events[i].Cause = causes[i]
	}

	if n, err := q.RecordAnswers(ctx, answers); err != nil {
		return nil, fmt.Errorf("record answers: %w", err)
	} else if n != int64(len(orders)) {
		return nil, errAnsweredBefore
	}
	if len(taken) > 0 {
		if n, err := q.InsertReservationsOfOrders(ctx, lines); err != nil {
			return nil, fmt.Errorf("insert reservations: %w", err)
		} else if n != int64(len(lines.OrderIds)) {
			return nil, errAnsweredBefore
		}
		ids := slices.SortedFunc(maps.Keys(taken), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
		quantities := make([]int32, len(ids))
		for i, id := range ids {
			quantities[i] = taken[id]
		}
		if n, err := q.AddReserved(ctx, store.AddReservedParams{Ids: ids, Quantities: quantities}); err != nil {
			return nil, fmt.Errorf("add reserved: %w", err)
		} else if n != int64(len(ids)) {
			return nil, fmt.Errorf("reserved %d of %d books", n, len(ids))
		}
	}
	return decisions, outbox.WriteAll(ctx, tx, events)
}

// bookIDs is every book the orders name, once each.
func bookIDs(orders []orderevent.Order) []uuid.UUID {
	seen := map[uuid.UUID]bool{}
	var ids []uuid.UUID
	for _, o := range orders {
		for _, l := range o.Lines {
			if !seen[l.BookID] {
				seen[l.BookID] = true
				ids = append(ids, l.BookID)
			}
		}
	}
	return ids
}
