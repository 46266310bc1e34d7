// Package stock is the inventory service's domain: reserving stock for an order exactly
// once, and the catalogue of books the HTTP API shows. Read HandleOrderEvent, in
// reserve.go, first.
//
// It closes the duplicate-delivery failure. RabbitMQ and ordering's relay deliver each
// OrderPlaced at least once, sometimes twice, sometimes twice at the same moment, and
// stock reservation is a difference (reserved + 2), not an absolute value: applied twice,
// it promises four copies of Dune for an order of two. HandleOrderEvent makes the
// message's inbox row, the reservation and the outcome event one transaction.
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
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
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

// Options configures a Service. The zero value is the production configuration.
type Options struct {
	// MaxBooks bounds the catalogue: PUT /books/{id} creates no book beyond it. Zero is
	// contracts.MaxBooks; tests set less.
	MaxBooks int
}

// Service runs the inventory use cases against the inventory database.
type Service struct {
	pool     *pgxpool.Pool
	maxBooks int
	log      *slog.Logger
	tracer   trace.Tracer
	orders   metric.Int64Counter
}

// NewService returns the inventory use cases.
func NewService(pool *pgxpool.Pool, tel *telemetry.Telemetry, opts Options) (*Service, error) {
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
		pool:     pool,
		maxBooks: opts.MaxBooks,
		log:      tel.Logger.With("component", "stock"),
		tracer:   tel.Tracer("stock"),
		orders:   orders,
	}, nil
}

// count adds one message answered with outcome (decision.Outcome, release.Outcome) to
// bookstore.inventory.orders.
func (s *Service) count(ctx context.Context, outcome string) {
	s.orders.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
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
