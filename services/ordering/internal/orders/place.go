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
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// Source is the CloudEvents source of ordering's events.
const Source = contracts.OrderingSource

// Service runs the ordering use cases against the ordering database.
type Service struct {
	pool   *pgxpool.Pool
	tracer trace.Tracer
	log    *slog.Logger
	// pipelined: PlaceOrder takes the fast form of pipeline.go; false, the plain one
	// (SetPipelined).
	pipelined     bool
	placedVersion int // the version of OrderPlaced this service writes: 1 or 2
	// poolWait bounds an API request's wait for its turn at the database (shed.go), one
	// of slots, as many as the pool has connections; 0: no bound.
	poolWait time.Duration
	slots    *semaphore.Weighted
}

// NewService returns the ordering use cases, which write the event of each change into
// the outbox, in the change's transaction. placedVersion is the version of OrderPlaced it
// writes (ORDERING_ORDER_PLACED_VERSION): 2 writes ordering.order-placed.v2, anything
// else v1.
func NewService(pool *pgxpool.Pool, tracer trace.Tracer, log *slog.Logger, placedVersion int) *Service {
	s := &Service{pool: pool, tracer: tracer, log: log, placedVersion: placedVersion, pipelined: true}
	s.SetPoolWait(DefaultPoolWait)
	return s
}

// OrderPlacedVersions are the versions of OrderPlaced ordering can write.
var OrderPlacedVersions = []int{1, 2}

// Answer is the outcome of a request that changes an order: PlaceOrder or CancelOrder.
type Answer struct {
	Order    Order
	Body     []byte // the response body; for a replay, the first response's bytes
	Replayed bool   // true when the Idempotency-Key had already answered this request
}

// PlaceOrder stores a new order and its OrderPlaced event in one transaction (see
// answerOnce). key is the Idempotency-Key, "" when the client sent none. In the plain
// form below a new order with a key is five round trips to Postgres: BEGIN, lock and
// lookup, the inserts, the outbox row, COMMIT. Unless SetPipelined(false) chose the plain
// form, it takes the fast one instead (placePipelined), the same statements in two round
// trips.
func (s *Service) PlaceOrder(ctx context.Context, key string, req PlaceOrderRequest) (Answer, error) {
	if s.pipelined {
		return s.placePipelined(ctx, key, req)
	}
	return s.answerOnce(ctx, change{
		name: "PlaceOrder", scope: placeScope, key: key, request: req,
		lookup: func(ctx context.Context, db *idempotency.LookupDB) (idempotency.Stored, error) {
			return lookupPlaced(ctx, db, key)
		},
		apply: func(ctx context.Context, tx pgx.Tx, requestHash []byte) (Answer, outbox.Event, error) {
			return s.place(ctx, tx, key, requestHash, req)
		},
	})
}

// placeScope is the scope of POST /orders' Idempotency-Keys.
const placeScope = "ordering/orders"

// lookupPlaced reads the answer stored under a POST /orders key, with one query on db.
func lookupPlaced(ctx context.Context, db *idempotency.LookupDB, key string) (idempotency.Stored, error) {
	prev, err := store.New(db).GetIdempotencyKey(ctx, key)
	return idempotency.Stored{RequestHash: prev.RequestHash, Response: prev.ResponseBody}, err
}

// change is a request that changes an order, as answerOnce runs it.
type change struct {
	name    string // the use case, which names its span: "PlaceOrder"
	scope   string // the scope of its Idempotency-Keys: "ordering/orders"
	key     string // the Idempotency-Key; "" when the client sent none
	request any    // what the key stands for: the same key with another request is refused
	// lookup reads the answer stored under key, with one query on db.
	lookup func(ctx context.Context, db *idempotency.LookupDB) (idempotency.Stored, error)
	// apply makes the change in tx, with a key stores the key and the answer too, and
	// returns the answer and the event that announces the change.
	apply func(ctx context.Context, tx pgx.Tx, requestHash []byte) (Answer, outbox.Event, error)
}

// answerOnce runs c in one transaction with its event. The order of statements is what
// makes it safe:
//  1. With a key, idempotency.Do locks it and looks it up in one round trip: it replays a
//     committed earlier request, and a copy arriving while the first is at work gets
//     ErrKeyInFlight instead of a second change.
//  2. c.apply makes the change, then its event is written as an outbox row.
//  3. Commit. A crash before it leaves nothing (no change, no event, no key), so the
//     client's retry with the same key does the work afresh.
func (s *Service) answerOnce(ctx context.Context, c change) (Answer, error) {
	ctx, span := s.tracer.Start(ctx, c.name+" transaction", trace.WithAttributes(attribute.Bool("bookstore.idempotency_key", c.key != "")))
	defer span.End()

	requestHash, err := idempotency.Hash(c.request)
	if err != nil {
		return Answer{}, err
	}
	var ans Answer
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		do := func() ([]byte, error) {
			a, e, err := c.apply(ctx, tx, requestHash)
			if err != nil {
				return nil, err
			}
			ans = a
			if _, err := outbox.Write(ctx, tx, e); err != nil {
				return nil, err
			}
			// Everything is written and nothing is committed: a crash here must leave no trace.
			return ans.Body, failpoint.Inject(ctx, contracts.OrderingBeforeCommit)
		}
		if c.key == "" {
			_, err := do()
			return err
		}
		k := idempotency.Key{Scope: c.scope, Key: c.key, RequestHash: requestHash}
		lookup := func(db *idempotency.LookupDB) (idempotency.Stored, error) { return c.lookup(ctx, db) }
		res, err := idempotency.Do(ctx, tx, k, lookup, do)
		if err != nil || !res.Replayed {
			return err
		}
		ans = Answer{Body: res.Response, Replayed: true}
		return json.Unmarshal(res.Response, &ans.Order)
	})
	if err != nil {
		return Answer{}, err
	}
	return ans, nil
}

// place writes a new order in tx: the order, its lines and, with a key, the key with the
// response, and returns its OrderPlaced event. Every value is chosen here, the order's
// id, created_at and version included, so no insert has to return one and its inserts go
// to Postgres in one batch.
func (s *Service) place(ctx context.Context, tx pgx.Tx, key string, requestHash []byte, req PlaceOrderRequest) (Answer, outbox.Event, error) {
	p, err := s.newOrder(key, requestHash, req)
	if err != nil {
		return Answer{}, outbox.Event{}, err
	}
	if err := tx.SendBatch(ctx, p.inserts).Close(); err != nil {
		return Answer{}, outbox.Event{}, fmt.Errorf("insert order: %w", err)
	}
	return p.answer, p.event, nil
}

// placing is a new order as newOrder decides it, before anything is sent: its answer,
// the batch of its inserts and its OrderPlaced event.
type placing struct {
	answer  Answer
	inserts *pgx.Batch
	event   outbox.Event
}

// newOrder decides a new order: its id, times and version, its response body and its
// event, and queues its inserts (with a key, the key's too) on a batch.
func (s *Service) newOrder(key string, requestHash []byte, req PlaceOrderRequest) (placing, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return placing{}, err
	}
	const version = 1 // a new order's, and the sequence of its first event
	// Microseconds, as Postgres keeps them: the response shows what GET will.
	now := time.Now().UTC().Truncate(time.Microsecond)
	order := Order{ID: id, CustomerEmail: req.CustomerEmail, Status: Pending, Lines: req.lines(), CreatedAt: now, UpdatedAt: now,
		History: []Step{{Event: "placed", At: now}}}
	body, err := json.Marshal(order)
	if err != nil {
		return placing{}, err
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
	typ, data := s.orderPlacedData(order)
	return placing{answer: Answer{Order: order, Body: body}, inserts: b, event: orderPlaced(id, version, typ, data)}, nil
}

// orderPlacedData is the type and data of a new order's OrderPlaced event, in the version
// this service writes. Only the type (and with it the routing key and the outbox's
// schema_version) and the data's shape differ between versions.
func (s *Service) orderPlacedData(o Order) (string, any) {
	if s.placedVersion == 2 {
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
