// Package stock is the inventory service's domain: reserving stock for an order exactly
// once, and the catalogue of books the HTTP API shows. Read ReserveStock first.
//
// It closes the duplicate-delivery failure. RabbitMQ and ordering's relay deliver each
// OrderPlaced at least once, sometimes twice, sometimes twice at the same moment, and
// stock reservation is a difference (reserved + 2), not an absolute value: applied twice,
// it promises four copies of Dune for an order of two. The default strategy (inbox) makes
// the message's inbox row, the reservation and the outcome event one transaction. The two
// other strategies are the ways this is usually got wrong, kept side by side so that the
// tests, `make demo` and the chaos run can show what each lets through.
package stock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
)

// Names inventory's events and inbox rows carry.
const (
	// Source is the CloudEvents source of inventory's events.
	Source = contracts.InventorySource
	// ConsumerName is inventory's key in its inbox and its consumer's metric label.
	ConsumerName = "inventory"
	// AggregateType is the aggregate inventory's events are about: one order's
	// reservation, identified by the order id.
	AggregateType = "reservation"
)

// OrderEventTypes are the events HandleOrderEvent handles; any other type is poison.
// Both versions of OrderPlaced while ordering migrates from v1 to v2 (v1 leaves this list
// once no v1 is left to read, docs/schema-evolution.md), and OrderCancelled.
var OrderEventTypes = []string{contracts.OrderPlaced, contracts.OrderPlacedV2, contracts.OrderCancelled}

// Strategy is how the consumer keeps a redelivered message from reserving twice.
type Strategy string

const (
	// Inbox claims the message's inbox row as the first statement of the transaction
	// that reserves the stock and writes the outcome event. The right way; the default.
	Inbox Strategy = "inbox"
	// CheckThenProcess asks "seen it?", reserves in one transaction and records the
	// message in another. Lets through a crash between the two, and two concurrent copies.
	CheckThenProcess Strategy = "check-then-process"
	// Naive reserves on every delivery. Lets through every redelivery.
	Naive Strategy = "naive"
)

// ParseStrategy reads INVENTORY_STRATEGY.
func ParseStrategy(s string) (Strategy, error) {
	switch st := Strategy(s); st {
	case Inbox, CheckThenProcess, Naive:
		return st, nil
	}
	return "", fmt.Errorf("INVENTORY_STRATEGY=%q: want inbox, check-then-process or naive", s)
}

// Hooks are the two failure windows of a handler, named by the contracts' failpoints. A
// nil hook runs the failpoint (a no-op unless BOOKSTORE_FAILPOINTS configures it). The
// experiments of `make demo` set them to simulate a crash in-process or to hold a
// transaction open; production code never does.
type Hooks struct {
	// BeforeCommit runs when the inbox row (if the strategy has one), the reservation and
	// the outcome event are written and not yet committed. An error rolls them back.
	BeforeCommit func(context.Context) error
	// AfterCommit runs when the reservation is committed and the message not yet acked.
	// An error stands for a crash: the consumer requeues the message.
	AfterCommit func(context.Context) error
}

func (h Hooks) beforeCommit(ctx context.Context) error {
	if h.BeforeCommit != nil {
		return h.BeforeCommit(ctx)
	}
	return failpoint.Inject(ctx, contracts.InventoryBeforeCommit)
}

func (h Hooks) afterCommit(ctx context.Context) error {
	if h.AfterCommit != nil {
		return h.AfterCommit(ctx)
	}
	return failpoint.Inject(ctx, contracts.InventoryAfterCommit)
}

// Options configures a Service. The zero value is the production configuration.
type Options struct {
	Strategy Strategy // default Inbox
	Hooks    Hooks
	// IgnoreSequence is the wrong way to apply cancellations, kept for the chaos
	// comparison (INVENTORY_CANCELLATIONS=ignore-sequence): each event is applied as it
	// arrives, and a cancellation that finds no answer for its order leaves no row
	// behind, so a placement that arrives after it reserves for a cancelled order.
	IgnoreSequence bool
	// MaxBooks bounds the catalogue: PUT /books/{id} creates no book beyond it. Zero is
	// contracts.MaxBooks; tests set less.
	MaxBooks int
}

// Service runs the inventory use cases against the inventory database.
type Service struct {
	pool      *pgxpool.Pool
	strategy  Strategy
	hooks     Hooks
	maxBooks  int
	ignoreSeq bool
	log       *slog.Logger
	tracer    trace.Tracer
	orders    metric.Int64Counter
}

// NewService returns the inventory use cases.
func NewService(pool *pgxpool.Pool, tel *telemetry.Telemetry, opts Options) (*Service, error) {
	if opts.Strategy == "" {
		opts.Strategy = Inbox
	}
	if _, err := ParseStrategy(string(opts.Strategy)); err != nil {
		return nil, err
	}
	if opts.MaxBooks == 0 {
		opts.MaxBooks = contracts.MaxBooks
	}
	orders, err := tel.Meter("stock").Int64Counter("bookstore.inventory.orders",
		metric.WithDescription("Orders answered, by outcome: reserved, rejected, or already-answered "+
			"(the same order under a second message id, stopped by the order_answers table)."))
	if err != nil {
		return nil, fmt.Errorf("stock metrics: %w", err)
	}
	return &Service{
		pool:      pool,
		strategy:  opts.Strategy,
		hooks:     opts.Hooks,
		ignoreSeq: opts.IgnoreSequence,
		maxBooks:  opts.MaxBooks,
		log:       tel.Logger.With("component", "stock", "strategy", string(opts.Strategy)),
		tracer:    tel.Tracer("stock"),
		orders:    orders,
	}, nil
}

// Strategy is the consumer strategy this service runs.
func (s *Service) Strategy() Strategy { return s.strategy }

func (s *Service) count(ctx context.Context, outcome string) {
	s.orders.Add(ctx, 1, metric.WithAttributes(
		attribute.String("outcome", outcome),
		attribute.String("strategy", string(s.strategy))))
}

// Errors of the catalogue use cases, mapped to HTTP statuses by the API.
var ErrNotFound = errors.New("book not found")

// BelowReservedError refuses an on_hand lower than the copies already promised to orders.
type BelowReservedError struct {
	OnHand, Reserved int
}

func (e *BelowReservedError) Error() string {
	return fmt.Sprintf("on_hand %d is below the %d copies reserved for orders", e.OnHand, e.Reserved)
}

// CatalogueFullError refuses a new book when the catalogue holds its maximum number.
type CatalogueFullError struct {
	Max int
}

func (e *CatalogueFullError) Error() string {
	return fmt.Sprintf("the catalogue holds its maximum of %d books; a new book cannot be added (an existing one can still be replaced)", e.Max)
}

// Migrations are the schema of inventory's database, applied on every start: the
// platform's outbox and inbox, then inventory's books (seeded) and reservations.
var Migrations = []pgdb.Migrations{
	{FS: schema.Platform, VersionTable: "goose_platform_version"},
	{FS: schema.Inventory, VersionTable: "goose_inventory_version"},
}
