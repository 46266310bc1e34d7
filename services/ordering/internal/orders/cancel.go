package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// CancelOrderRequest is the body of POST /orders/{id}/cancel: an empty JSON object
// today, a place for fields to come (an unknown field is malformed), or no body at all.
type CancelOrderRequest struct{}

// Valid reports no problem: an empty object has no rules to break.
func (CancelOrderRequest) Valid() map[string]string { return nil }

// BodyOptional lets a cancel come with no body (curl -X POST), which is {}.
func (CancelOrderRequest) BodyOptional() {}

// cancelRequest is what an Idempotency-Key of POST /orders/{id}/cancel names: the same
// key for another order is a different request (422 idempotency-key-reused).
type cancelRequest struct {
	OrderID uuid.UUID `json:"order_id"`
}

// CancelOrder moves a pending or confirmed order to cancelled and writes its
// ordering.order-cancelled.v1 in one transaction (see answerOnce). The event's sequence
// is the order's version after the change, above its OrderPlaced's, so a consumer that
// sees both, in either order, knows which came last (docs/cancellation.md). key is the
// Idempotency-Key, "" when the client sent none.
func (s *Service) CancelOrder(ctx context.Context, key string, id uuid.UUID) (Answer, error) {
	return s.answerOnce(ctx, change{
		name: "CancelOrder", scope: "ordering/cancel", key: key, request: cancelRequest{OrderID: id},
		lookup: func(ctx context.Context, db *idempotency.LookupDB) (idempotency.Stored, error) {
			prev, err := store.New(db).GetCancelIdempotencyKey(ctx, key)
			return idempotency.Stored{RequestHash: prev.RequestHash, Response: prev.ResponseBody}, err
		},
		apply: func(ctx context.Context, tx pgx.Tx, requestHash []byte) (Answer, outbox.Event, error) {
			return s.cancel(ctx, tx, key, requestHash, id)
		},
	})
}

// cancel does the work of CancelOrder in tx and returns its OrderCancelled event.
//
// The UPDATE decides between concurrent cancels: it takes the order's row lock, and a
// second cancel waits for it, then finds the order cancelled and changes nothing, so one
// cancellation writes one event. A rejected or already cancelled order is a
// NotCancellableError (409) and stays so, which is why only a successful cancellation is
// stored under its key: a retry of a refused one is refused again.
func (s *Service) cancel(ctx context.Context, tx pgx.Tx, key string, requestHash []byte, id uuid.UUID) (Answer, outbox.Event, error) {
	q := store.New(tx)
	now := time.Now().UTC().Truncate(time.Microsecond)
	row, err := q.CancelOrder(ctx, store.CancelOrderParams{ID: id, At: now})
	if errors.Is(err, pgx.ErrNoRows) {
		prev, err := q.GetOrder(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return Answer{}, outbox.Event{}, ErrNotFound
		}
		if err != nil {
			return Answer{}, outbox.Event{}, fmt.Errorf("get order: %w", err)
		}
		return Answer{}, outbox.Event{}, NotCancellableError{Status: Status(prev.Status)}
	}
	if err != nil {
		return Answer{}, outbox.Event{}, fmt.Errorf("cancel order: %w", err)
	}
	if err := q.InsertOrderHistory(ctx, store.InsertOrderHistoryParams{OrderID: id, Event: string(Cancelled), At: now}); err != nil {
		return Answer{}, outbox.Event{}, fmt.Errorf("order history: %w", err)
	}
	order, err := getOrder(ctx, q, id)
	if err != nil {
		return Answer{}, outbox.Event{}, err
	}
	body, err := json.Marshal(order)
	if err != nil {
		return Answer{}, outbox.Event{}, err
	}
	if key != "" {
		if err := q.InsertCancelIdempotencyKey(ctx, store.InsertCancelIdempotencyKeyParams{
			Key: key, RequestHash: requestHash, OrderID: id, ResponseStatus: 200, ResponseBody: body,
		}); err != nil {
			return Answer{}, outbox.Event{}, fmt.Errorf("insert idempotency key: %w", err)
		}
	}
	return Answer{Order: order, Body: body}, outbox.Event{
		Source:        Source,
		Type:          contracts.OrderCancelled,
		AggregateType: "order",
		AggregateID:   id.String(),
		Sequence:      row.Version,
		Data:          contracts.OrderCancelledData{OrderID: id, CustomerEmail: row.CustomerEmail, CancelledAt: now},
	}, nil
}
