// Package wrongways holds the ways ordering must not send its events, beside the real
// one in package orders, which writes each change's event into the outbox in the
// change's transaction. They exist to be shown failing: publish after the commit
// (ORDERING_PUBLISHER=direct, `make chaos-compare`, `make demo`), publish before it, and
// an event log nothing reads again (package experiments; docs/outbox.md).
//
// Each plugs in where the API calls the use cases (api.Orders): Orders places and
// cancels an order as orders.Service does, in one transaction with its Idempotency-Key,
// and hands the event to an Events instead of the outbox. Reads are orders.Service's own.
package wrongways

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
)

// Events is a wrong way of sending the event that announces an order's change.
type Events interface {
	// InTx is called in the change's transaction once the change is written, before the
	// commit; an error rolls the change back.
	InTx(ctx context.Context, tx pgx.Tx, env event.Envelope) error
	// Committed is called once the transaction has committed, never for a replay. Its
	// error is the event lost: the client has its answer all the same.
	Committed(ctx context.Context, env event.Envelope) error
}

// Orders is ordering's use cases with the event of each change sent by events, not
// written into the outbox. Its embedded orders.Service answers the reads (GetOrder,
// OrderEvents); PlaceOrder and CancelOrder are its own, and answer as the service's do,
// with the same errors and bodies, the same Idempotency-Key scopes and the failpoint
// contracts.OrderingBeforeCommit after the event's InTx. They shed no load: a request
// waits for a connection as long as its client does (ORDERING_POOL_WAIT bounds only the
// service's own).
type Orders struct {
	*orders.Service
	pool          *pgxpool.Pool
	events        Events
	placedVersion int
	log           *slog.Logger
}

// NewOrders returns the use cases of svc, whose database is pool, with the events of
// changes sent by events. placedVersion is the version of OrderPlaced it sends, as
// orders.NewService's.
func NewOrders(svc *orders.Service, pool *pgxpool.Pool, events Events, placedVersion int, log *slog.Logger) *Orders {
	return &Orders{Service: svc, pool: pool, events: events, placedVersion: placedVersion, log: log}
}

// PlaceOrder stores a new order and hands its OrderPlaced event to the Events.
func (o *Orders) PlaceOrder(ctx context.Context, key string, req orders.PlaceOrderRequest) (orders.Answer, error) {
	lookup := func(ctx context.Context, db *idempotency.LookupDB) (idempotency.Stored, error) {
		prev, err := store.New(db).GetIdempotencyKey(ctx, key)
		return idempotency.Stored{RequestHash: prev.RequestHash, Response: prev.ResponseBody}, err
	}
	return o.change(ctx, "ordering/orders", key, req, lookup, func(tx pgx.Tx, requestHash []byte) (orders.Answer, event.Envelope, error) {
		return o.place(ctx, tx, key, requestHash, req)
	})
}

// CancelOrder cancels a pending or confirmed order and hands its OrderCancelled event to
// the Events.
func (o *Orders) CancelOrder(ctx context.Context, key string, id uuid.UUID) (orders.Answer, error) {
	lookup := func(ctx context.Context, db *idempotency.LookupDB) (idempotency.Stored, error) {
		prev, err := store.New(db).GetCancelIdempotencyKey(ctx, key)
		return idempotency.Stored{RequestHash: prev.RequestHash, Response: prev.ResponseBody}, err
	}
	request := struct {
		OrderID uuid.UUID `json:"order_id"`
	}{id}
	return o.change(ctx, "ordering/cancel", key, request, lookup, func(tx pgx.Tx, requestHash []byte) (orders.Answer, event.Envelope, error) {
		return o.cancel(ctx, tx, key, requestHash, id)
	})
}

// change runs apply in one transaction under key, as orders.Service's answerOnce does,
// with the Events in place of the outbox row.
func (o *Orders) change(ctx context.Context, scope, key string, request any,
	lookup func(context.Context, *idempotency.LookupDB) (idempotency.Stored, error),
	apply func(tx pgx.Tx, requestHash []byte) (orders.Answer, event.Envelope, error),
) (orders.Answer, error) {
	requestHash, err := idempotency.Hash(request)
	if err != nil {
		return orders.Answer{}, err
	}
	var ans orders.Answer
	var env event.Envelope
	err = pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		do := func() ([]byte, error) {
			var err error
			if ans, env, err = apply(tx, requestHash); err != nil {
				return nil, err
			}
			if err := o.events.InTx(ctx, tx, env); err != nil {
				return nil, err
			}
			return ans.Body, failpoint.Inject(ctx, contracts.OrderingBeforeCommit)
		}
		if key == "" {
			_, err := do()
			return err
		}
		k := idempotency.Key{Scope: scope, Key: key, RequestHash: requestHash}
		res, err := idempotency.Do(ctx, tx, k, func(db *idempotency.LookupDB) (idempotency.Stored, error) { return lookup(ctx, db) }, do)
		if err != nil || !res.Replayed {
			return err
		}
		ans = orders.Answer{Body: res.Response, Replayed: true}
		return json.Unmarshal(res.Response, &ans.Order)
	})
	if err != nil {
		return orders.Answer{}, err
	}
	if !ans.Replayed {
		if err := o.events.Committed(ctx, env); err != nil {
			o.log.ErrorContext(ctx, "the event was not sent after the commit: it is lost", "event_id", env.ID, "type", env.Type, "err", err)
		}
	}
	return ans, nil
}

// place writes a new order, its lines, its history and, with a key, the key with the
// response, and returns its OrderPlaced event.
func (o *Orders) place(ctx context.Context, tx pgx.Tx, key string, requestHash []byte, req orders.PlaceOrderRequest) (orders.Answer, event.Envelope, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return orders.Answer{}, event.Envelope{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	order := orders.Order{ID: id, CustomerEmail: req.CustomerEmail, Status: orders.Pending, CreatedAt: now, UpdatedAt: now,
		History: []orders.Step{{Event: "placed", At: now}}}
	bookIDs, quantities := make([]uuid.UUID, len(req.Lines)), make([]int32, len(req.Lines))
	lines := make([]contracts.Line, len(req.Lines))
	for i, l := range req.Lines { // valid: the API checked the request
		bookIDs[i], quantities[i] = uuid.MustParse(l.BookID), int32(l.Quantity)
		order.Lines = append(order.Lines, orders.Line{BookID: bookIDs[i], Quantity: l.Quantity})
		lines[i] = contracts.Line{BookID: bookIDs[i], Quantity: l.Quantity}
	}
	body, err := json.Marshal(order)
	if err != nil {
		return orders.Answer{}, event.Envelope{}, err
	}
	const version = 1
	b := &pgx.Batch{}
	store.QueueInsertOrder(b, store.InsertOrderParams{ID: id, CustomerEmail: order.CustomerEmail, Status: string(order.Status), Version: version, CreatedAt: now})
	store.QueueInsertOrderLines(b, store.InsertOrderLinesParams{OrderID: id, BookIds: bookIDs, Quantities: quantities})
	store.QueueInsertOrderHistory(b, store.InsertOrderHistoryParams{OrderID: id, Event: "placed", At: now})
	if key != "" {
		store.QueueInsertIdempotencyKey(b, store.InsertIdempotencyKeyParams{
			Key: key, RequestHash: requestHash, OrderID: id, ResponseStatus: 201, ResponseBody: body,
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return orders.Answer{}, event.Envelope{}, fmt.Errorf("insert order: %w", err)
	}
	var env event.Envelope
	if o.placedVersion == 2 {
		env, err = event.New(contracts.OrderingSource, contracts.OrderPlacedV2, id.String(), version, contracts.OrderPlacedV2Data{
			OrderID: id, Customer: contracts.Customer{Email: order.CustomerEmail}, Lines: lines, PlacedAt: now,
		})
	} else {
		env, err = event.New(contracts.OrderingSource, contracts.OrderPlaced, id.String(), version, contracts.OrderPlacedData{
			OrderID: id, CustomerEmail: order.CustomerEmail, Lines: lines, PlacedAt: now,
		})
	}
	return orders.Answer{Order: order, Body: body}, env, err
}

// cancel moves the order to cancelled, adds the step to its history and, with a key,
// stores the key with the response, and returns its OrderCancelled event. A rejected or
// cancelled order is an orders.NotCancellableError, stored under no key.
func (o *Orders) cancel(ctx context.Context, tx pgx.Tx, key string, requestHash []byte, id uuid.UUID) (orders.Answer, event.Envelope, error) {
	q := store.New(tx)
	now := time.Now().UTC().Truncate(time.Microsecond)
	row, err := q.CancelOrder(ctx, store.CancelOrderParams{ID: id, At: now})
	if errors.Is(err, pgx.ErrNoRows) {
		prev, err := q.GetOrder(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return orders.Answer{}, event.Envelope{}, orders.ErrNotFound
		}
		if err != nil {
			return orders.Answer{}, event.Envelope{}, fmt.Errorf("get order: %w", err)
		}
		return orders.Answer{}, event.Envelope{}, orders.NotCancellableError{Status: orders.Status(prev.Status)}
	}
	if err != nil {
		return orders.Answer{}, event.Envelope{}, fmt.Errorf("cancel order: %w", err)
	}
	if err := q.InsertOrderHistory(ctx, store.InsertOrderHistoryParams{OrderID: id, Event: string(orders.Cancelled), At: now}); err != nil {
		return orders.Answer{}, event.Envelope{}, fmt.Errorf("order history: %w", err)
	}
	order, err := readOrder(ctx, q, row)
	if err != nil {
		return orders.Answer{}, event.Envelope{}, err
	}
	body, err := json.Marshal(order)
	if err != nil {
		return orders.Answer{}, event.Envelope{}, err
	}
	if key != "" {
		if err := q.InsertCancelIdempotencyKey(ctx, store.InsertCancelIdempotencyKeyParams{
			Key: key, RequestHash: requestHash, OrderID: id, ResponseStatus: 200, ResponseBody: body,
		}); err != nil {
			return orders.Answer{}, event.Envelope{}, fmt.Errorf("insert idempotency key: %w", err)
		}
	}
	env, err := event.New(contracts.OrderingSource, contracts.OrderCancelled, id.String(), row.Version,
		contracts.OrderCancelledData{OrderID: id, CustomerEmail: row.CustomerEmail, CancelledAt: now})
	return orders.Answer{Order: order, Body: body}, env, err
}

// readOrder is the order of row with its lines and history, as GET /orders/{id} shows it.
func readOrder(ctx context.Context, q *store.Queries, row store.Order) (orders.Order, error) {
	order := orders.Order{ID: row.ID, CustomerEmail: row.CustomerEmail, Status: orders.Status(row.Status),
		CreatedAt: row.CreatedAt.UTC().Truncate(time.Microsecond), UpdatedAt: row.UpdatedAt.UTC().Truncate(time.Microsecond)}
	lines, err := q.ListOrderLines(ctx, row.ID)
	if err != nil {
		return order, fmt.Errorf("get order lines: %w", err)
	}
	for _, l := range lines {
		order.Lines = append(order.Lines, orders.Line{BookID: l.BookID, Quantity: int(l.Quantity)})
	}
	steps, err := q.ListOrderHistory(ctx, row.ID)
	if err != nil {
		return order, fmt.Errorf("get order history: %w", err)
	}
	for _, st := range steps {
		order.History = append(order.History, orders.Step{Event: st.Event, At: st.At.UTC().Truncate(time.Microsecond)})
	}
	return order, nil
}
