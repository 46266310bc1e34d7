package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// CancelResult is the outcome of CancelOrder.
type CancelResult struct {
	Order    Order
	Body     []byte // the response body; for a replay, the first response's bytes
	Replayed bool   // true when the Idempotency-Key had already cancelled this order
}

// CancelOrderRequest is the body of POST /orders/{id}/cancel: an empty JSON object
// today, a place for fields to come (an unknown field is malformed).
type CancelOrderRequest struct{}

// Valid: an empty object has no rules to break.
func (CancelOrderRequest) Valid() map[string]string { return nil }

// cancelRequest is what an Idempotency-Key of POST /orders/{id}/cancel names: the same
// key for another order is a different request (422 idempotency-key-reused).
type cancelRequest struct {
	OrderID uuid.UUID `json:"order_id"`
}

// CancelOrder moves a pending or confirmed order to cancelled and writes its
// ordering.order-cancelled.v1 into the outbox, in one transaction, with the order's
// version after the change as the event's sequence: above its OrderPlaced's, so a
// consumer that sees both, in either order, knows which came last (docs/cancellation.md).
// key is the Idempotency-Key, "" when the client sent none.
//
// The UPDATE decides between concurrent cancels: it takes the order's row lock, and a
// second cancel waits for it, then finds the order cancelled and changes nothing, so one
// cancellation writes one event. A rejected or already cancelled order is a
// NotCancellableError (409); it stays so, which is why only a successful cancellation is
// stored under its key: a retry of a refused one is refused again, as the first time.
func (s *Service) CancelOrder(ctx context.Context, key string, id uuid.UUID) (CancelResult, error) {
	ctx, span := s.tracer.Start(ctx, "CancelOrder transaction", trace.WithAttributes(attribute.Bool("bookstore.idempotency_key", key != "")))
	defer span.End()

	requestHash, err := idempotency.Hash(cancelRequest{OrderID: id})
	if err != nil {
		return CancelResult{}, err
	}
	var res CancelResult
	var env event.Envelope
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		cancel := func() ([]byte, error) {
			var err error
			res, env, err = s.cancel(ctx, tx, key, requestHash, id)
			if err != nil {
				return nil, err
			}
			return res.Body, failpoint.Inject(ctx, contracts.OrderingBeforeCommit)
		}
		if key == "" {
			_, err := cancel()
			return err
		}
		lookup := func(db *idempotency.LookupDB) (idempotency.Stored, error) {
			prev, err := store.New(db).GetCancelIdempotencyKey(ctx, key)
			return idempotency.Stored{RequestHash: prev.RequestHash, Response: prev.ResponseBody}, err
		}
		r, err := idempotency.Do(ctx, tx, idempotency.Key{Scope: "ordering/cancel", Key: key, RequestHash: requestHash}, lookup, cancel)
		if err != nil || !r.Replayed {
			return err
		}
		res = CancelResult{Body: r.Response, Replayed: true}
		return json.Unmarshal(r.Response, &res.Order)
	})
	if err != nil {
		return CancelResult{}, err
	}
	if s.direct != nil && !res.Replayed {
		s.publishDirect(ctx, env)
	}
	return res, nil
}

// cancel does the work of CancelOrder in tx.
func (s *Service) cancel(ctx context.Context, tx pgx.Tx, key string, requestHash []byte, id uuid.UUID) (CancelResult, event.Envelope, error) {
	q := store.New(tx)
	now := time.Now().UTC().Truncate(time.Microsecond)
	row, err := q.CancelOrder(ctx, store.CancelOrderParams{ID: id, At: now})
	if errors.Is(err, pgx.ErrNoRows) {
		prev, err := q.GetOrder(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return CancelResult{}, event.Envelope{}, ErrNotFound
		}
		if err != nil {
			return CancelResult{}, event.Envelope{}, fmt.Errorf("get order: %w", err)
		}
		return CancelResult{}, event.Envelope{}, NotCancellableError{Status: Status(prev.Status)}
	}
	if err != nil {
		return CancelResult{}, event.Envelope{}, fmt.Errorf("cancel order: %w", err)
	}
	if err := q.InsertOrderHistory(ctx, store.InsertOrderHistoryParams{OrderID: id, Event: string(Cancelled), At: now}); err != nil {
		return CancelResult{}, event.Envelope{}, fmt.Errorf("order history: %w", err)
	}
	order, err := getOrder(ctx, q, id)
	if err != nil {
		return CancelResult{}, event.Envelope{}, err
	}
	body, err := json.Marshal(order)
	if err != nil {
		return CancelResult{}, event.Envelope{}, err
	}
	if key != "" {
		if err := q.InsertCancelIdempotencyKey(ctx, store.InsertCancelIdempotencyKeyParams{
			Key: key, RequestHash: requestHash, OrderID: id, ResponseStatus: 200, ResponseBody: body,
		}); err != nil {
			return CancelResult{}, event.Envelope{}, fmt.Errorf("insert idempotency key: %w", err)
		}
	}
	e := outbox.Event{
		Source:        Source,
		Type:          contracts.OrderCancelled,
		AggregateType: "order",
		AggregateID:   id.String(),
		Sequence:      row.Version,
		Data:          contracts.OrderCancelledData{OrderID: id, CustomerEmail: row.CustomerEmail, CancelledAt: now},
	}
	var env event.Envelope
	if s.direct == nil {
		env, err = outbox.Write(ctx, tx, e)
	} else {
		env, err = event.New(Source, e.Type, e.AggregateID, e.Sequence, e.Data)
	}
	return CancelResult{Order: order, Body: body}, env, err
}
