package orders

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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// Source is the CloudEvents source of ordering's events.
const Source = contracts.OrderingSource

// Publisher publishes an event right away. Only the "direct" publishing mode uses it:
// the wrong way, kept to show what the outbox prevents.
type Publisher interface {
	PublishNow(ctx context.Context, env event.Envelope) error
}

// Service runs the ordering use cases against the ordering database.
type Service struct {
	pool   *pgxpool.Pool
	tracer trace.Tracer
	log    *slog.Logger
	direct Publisher // nil: events go through the outbox (the default, and the right way)
	placed int       // the version of OrderPlaced this service writes: 1 or 2
	// poolWait bounds an API request's wait for its turn at the database (shed.go), one
	// of slots, as many as the pool has connections; 0: no bound.
	poolWait time.Duration
	slots    *semaphore.Weighted
}

// NewService returns the ordering use cases. direct must be nil unless the service runs
// with ORDERING_PUBLISHER=direct for a demonstration. placedVersion is the version of
// OrderPlaced it writes (ORDERING_ORDER_PLACED_VERSION): 2 writes
// ordering.order-placed.v2, anything else v1.
func NewService(pool *pgxpool.Pool, tracer trace.Tracer, log *slog.Logger, direct Publisher, placedVersion int) *Service {
	s := &Service{pool: pool, tracer: tracer, log: log, direct: direct, placed: placedVersion}
	s.SetPoolWait(DefaultPoolWait)
	return s
}

// OrderPlacedVersions are the versions of OrderPlaced ordering can write.
var OrderPlacedVersions = []int{1, 2}

// Placed is the outcome of PlaceOrder.
type Placed struct {
	Order    Order
	Body     []byte // the response body; for a replay, the first response's bytes
	Replayed bool   // true when the Idempotency-Key had already placed this order
}

// PlaceOrder stores a new order and its OrderPlaced event in one transaction. key is the
// Idempotency-Key, "" when the client sent none.
//
// The order of statements is what makes this safe:
//  1. With a key, idempotency.Do locks it and looks it up, in one round trip: it replays
//     a committed earlier request, and a copy that arrives while the first is at work
//     gets ErrKeyInFlight instead of a second order.
//  2. Insert the order, its lines and the key with the response, in one round trip, then
//     the outbox row.
//  3. Commit. A crash anywhere before this leaves nothing: no order, no event, no key, so
//     the client's retry with the same key places the order afresh.
//
// A new order with a key is five round trips to Postgres: BEGIN, lock and lookup, the
// inserts, the outbox row, COMMIT.
func (s *Service) PlaceOrder(ctx context.Context, key string, req PlaceOrderRequest) (Placed, error) {
	ctx, span := s.tracer.Start(ctx, "PlaceOrder transaction", trace.WithAttributes(attribute.Bool("bookstore.idempotency_key", key != "")))
	defer span.End()

	requestHash, err := idempotency.Hash(req)
	if err != nil {
		return Placed{}, err
	}
	var placed Placed
	var env event.Envelope
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		place := func() ([]byte, error) {
			var err error
			placed, env, err = s.place(ctx, tx, key, requestHash, req)
			if err != nil {
				return nil, err
			}
			// Everything is written and nothing is committed: a crash here must leave no trace.
			return placed.Body, failpoint.Inject(ctx, contracts.OrderingBeforeCommit)
		}
		if key == "" {
			_, err := place()
			return err
		}
		lookup := func(db *idempotency.LookupDB) (idempotency.Stored, error) {
			prev, err := store.New(db).GetIdempotencyKey(ctx, key)
			return idempotency.Stored{RequestHash: prev.RequestHash, Response: prev.ResponseBody}, err
		}
		res, err := idempotency.Do(ctx, tx, idempotency.Key{Scope: "ordering/orders", Key: key, RequestHash: requestHash}, lookup, place)
		if err != nil || !res.Replayed {
			return err
		}
		placed = Placed{Body: res.Response, Replayed: true}
		return json.Unmarshal(res.Response, &placed.Order)
	})
	if err != nil {
		return Placed{}, err
	}
	if s.direct != nil && !placed.Replayed {
		s.publishDirect(ctx, env)
	}
	return placed, nil
}

// place writes a new order in tx: the order, its lines and, with a key, the key with the
// response, then, unless the service publishes directly, its OrderPlaced event into the
// outbox. Every value is chosen here, the order's id, created_at and version included, so
// no insert has to return one and the first three go to Postgres in one batch.
func (s *Service) place(ctx context.Context, tx pgx.Tx, key string, requestHash []byte, req PlaceOrderRequest) (Placed, event.Envelope, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Placed{}, event.Envelope{}, err
	}
	const version = 1 // a new order's, and the sequence of its first event
	// Microseconds, as Postgres keeps them: the response shows what GET will.
	now := time.Now().UTC().Truncate(time.Microsecond)
	order := Order{ID: id, CustomerEmail: req.CustomerEmail, Status: Pending, Lines: req.lines(), CreatedAt: now, UpdatedAt: now,
		History: []Step{{Event: "placed", At: now}}}
	body, err := json.Marshal(order)
	if err != nil {
		return Placed{}, event.Envelope{}, err
	}

	b := &pgx.Batch{}
	store.QueueInsertOrder(b, store.InsertOrderParams{
		ID: id, CustomerEmail: order.CustomerEmail, Status: string(order.Status), Version: version, CreatedAt: now,
	})
	bookIDs, quantities := make([]uuid.UUID, len(order.Lines)), make([]int32, len(order.Lines))
	for i, l := range order.Lines {
		bookIDs[i], quantities[i] = l.BookID, int32(l.Quantity)
	}
	store.QueueInsertOrderLines(b, store.InsertOrderLinesParams{OrderID: id, BookIds: bookIDs, Quantities: quantities})
	store.QueueInsertOrderHistory(b, store.InsertOrderHistoryParams{OrderID: id, Event: "placed", At: now})
	if key != "" {
		store.QueueInsertIdempotencyKey(b, store.InsertIdempotencyKeyParams{
			Key: key, RequestHash: requestHash, OrderID: id, ResponseStatus: 201, ResponseBody: body,
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Placed{}, event.Envelope{}, fmt.Errorf("insert order: %w", err)
	}

	typ, data := s.orderPlacedData(order)
	var env event.Envelope
	if s.direct == nil {
		// The event is part of the transaction: committed with the order or not at all.
		env, err = outbox.Write(ctx, tx, orderPlaced(id, version, typ, data))
	} else {
		env, err = event.New(Source, typ, id.String(), version, data)
	}
	return Placed{Order: order, Body: body}, env, err
}

// publishDirect is the dual write the outbox exists to prevent: the order is committed,
// and if the process dies now or the broker is down, its event is gone for good and the
// order stays pending forever. Never the default; see docs/outbox.md.
func (s *Service) publishDirect(ctx context.Context, env event.Envelope) {
	if err := s.direct.PublishNow(ctx, env); err != nil {
		s.log.ErrorContext(ctx, "direct publish failed: the event is lost", "event_id", env.ID, "err", err)
	}
}

// orderPlacedData is the type and data of a new order's OrderPlaced event, in the version
// this service writes. Both go through the outbox the same way; only the type (and with
// it the routing key and the outbox's schema_version) and the data's shape differ.
func (s *Service) orderPlacedData(o Order) (string, any) {
	if s.placed == 2 {
		return contracts.OrderPlacedV2, contracts.OrderPlacedV2Data{
			OrderID: o.ID, Customer: contracts.Customer{Email: o.CustomerEmail}, Lines: toEventLines(o.Lines), PlacedAt: o.CreatedAt,
		}
	}
	return contracts.OrderPlaced, contracts.OrderPlacedData{
		OrderID: o.ID, CustomerEmail: o.CustomerEmail, Lines: toEventLines(o.Lines), PlacedAt: o.CreatedAt,
	}
}

func orderPlaced(id uuid.UUID, version int64, typ string, data any) outbox.Event {
	return outbox.Event{
		Source:        Source,
		Type:          typ,
		AggregateType: "order",
		AggregateID:   id.String(),
		Sequence:      version,
		Data:          data,
	}
}

// GetOrder returns one order.
func (s *Service) GetOrder(ctx context.Context, id uuid.UUID) (order Order, err error) {
	err = s.read(ctx, func(conn *pgxpool.Conn) error {
		order, err = getOrder(ctx, store.New(conn), id)
		return err
	})
	return order, err
}

// getOrder reads one order, its lines and its history with q.
func getOrder(ctx context.Context, q *store.Queries, id uuid.UUID) (Order, error) {
	row, err := q.GetOrder(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("get order: %w", err)
	}
	lines, err := q.ListOrderLines(ctx, id)
	if err != nil {
		return Order{}, fmt.Errorf("get order lines: %w", err)
	}
	out := make([]Line, len(lines))
	for i, l := range lines {
		out[i] = Line{BookID: l.BookID, Quantity: int(l.Quantity)}
	}
	steps, err := q.ListOrderHistory(ctx, id)
	if err != nil {
		return Order{}, fmt.Errorf("get order history: %w", err)
	}
	order := fromRow(row, out)
	order.History = make([]Step, len(steps))
	for i, st := range steps {
		order.History[i] = Step{Event: st.Event, At: st.At.UTC().Truncate(time.Microsecond)}
	}
	return order, nil
}

func fromRow(row store.Order, lines []Line) Order {
	return Order{
		ID:            row.ID,
		CustomerEmail: row.CustomerEmail,
		Status:        Status(row.Status),
		Lines:         lines,
		CreatedAt:     row.CreatedAt.UTC().Truncate(time.Microsecond),
		UpdatedAt:     row.UpdatedAt.UTC().Truncate(time.Microsecond),
	}
}

func toEventLines(lines []Line) []contracts.Line {
	out := make([]contracts.Line, len(lines))
	for i, l := range lines {
		out[i] = contracts.Line{BookID: l.BookID, Quantity: l.Quantity}
	}
	return out
}
