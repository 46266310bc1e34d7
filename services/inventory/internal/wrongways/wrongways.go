// Package wrongways holds the consumers inventory must not run: the usual ways an
// idempotent consumer is got wrong (no dedup, check-then-process, record first, a cache
// as the only guard, a duplicate failed instead of acked, the ack before the work), a
// cancellation applied without its sequence, an inbox keyed on the correlation id, a
// handler that writes through the pool inside its transaction, and the inbox without
// stock's order key, which a producer minting a new id per send defeats. They exist to
// be shown failing, by the tests, `make demo` and `make chaos-compare`, beside the right
// one in package stock (docs/idempotent-consumer.md, docs/cancellation.md).
//
// Each writes the rows and events stock writes, with its own copy of the work (work.go)
// and its own queries (wrongstore): what it lacks is how stock keeps a message, or an
// order, from being applied twice or lost. From stock it takes only what inventory's
// command takes too, so that no wrong way shapes stock's API.
package wrongways

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Strategy is how a consumer keeps a redelivered placement from reserving twice
// (INVENTORY_STRATEGY).
type Strategy string

const (
	// Inbox is stock's way, and the default: the inbox row, the reservation and the
	// outcome event in one transaction.
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

// Hooks are the two failure windows of a wrong consumer, named by the contracts'
// failpoints. A nil hook runs the failpoint (a no-op unless BOOKSTORE_FAILPOINTS
// configures it); the experiments of `make demo` and the tests set them to crash
// in-process or to hold a copy where the window is.
type Hooks struct {
	// BeforeCommit runs when the reservation and the outcome event are written and not
	// yet committed. An error rolls them back.
	BeforeCommit func(context.Context) error
	// AfterCommit runs when the work is committed and the message not yet acked. An error
	// stands for a crash: the consumer requeues the message.
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

// Options chooses the wrong ways a Consumer takes; what it does not take wrong, it hands
// to stock.
type Options struct {
	Strategy Strategy // for placements; Inbox hands them to stock
	// IgnoreSequence applies each cancellation as it arrives: one that finds no answer
	// for its order leaves no row behind, so a placement that arrives after it reserves
	// for a cancelled order (INVENTORY_CANCELLATIONS=ignore-sequence).
	IgnoreSequence bool
	// KeyOnCorrelationID claims the inbox under the order's id, for every event of the
	// order, instead of under the message's id: the order's cancellation finds the key its
	// placement took and is acked as a duplicate. It handles both event types, in place of
	// Strategy and IgnoreSequence.
	KeyOnCorrelationID bool
	// WriteThroughPool reserves a placement's copies through the pool, a second
	// connection, inside the transaction that claims its inbox row: a rollback keeps them.
	WriteThroughPool bool
	// RecordFirst records a placement's message in the inbox and commits that before it
	// reserves, in a second transaction: a crash between the two loses the reservation.
	// It takes the place of Strategy.
	RecordFirst bool
	// MessageIDOnly reserves a placement behind the inbox, in its transaction, without
	// stock's order key: a copy of the order under a new message id is reserved again.
	// It takes the place of Strategy.
	MessageIDOnly bool
	Hooks         Hooks
}

// Consumer is a handler for inventory.order-placed that takes the wrong ways Options
// names.
type Consumer struct {
	stock          *stock.Service
	pool           *pgxpool.Pool
	strategy       Strategy
	ignoreSequence bool
	correlationKey bool
	throughPool    bool
	recordFirst    bool
	messageIDOnly  bool
	hooks          Hooks
	log            *slog.Logger
	tracer         trace.Tracer
}

// New returns a Consumer that works on svc's database, pool.
func New(pool *pgxpool.Pool, tel *telemetry.Telemetry, svc *stock.Service, opts Options) (*Consumer, error) {
	if _, err := ParseStrategy(string(opts.Strategy)); err != nil {
		return nil, err
	}
	return &Consumer{
		stock:          svc,
		pool:           pool,
		strategy:       opts.Strategy,
		ignoreSequence: opts.IgnoreSequence,
		correlationKey: opts.KeyOnCorrelationID,
		throughPool:    opts.WriteThroughPool,
		recordFirst:    opts.RecordFirst,
		messageIDOnly:  opts.MessageIDOnly,
		hooks:          opts.Hooks,
		log:            tel.Logger.With("component", "stock", "strategy", string(opts.Strategy)),
		tracer:         tel.Tracer("stock"),
	}, nil
}

// HandleOrderEvent is the consumer's handler, as stock.Service.HandleOrderEvent is, for
// the ways Options chose.
func (c *Consumer) HandleOrderEvent(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	switch {
	case c.correlationKey:
		return c.handleKeyedOnCorrelationID(ctx, env)
	case env.Type == contracts.OrderCancelled && c.ignoreSequence:
		return c.releaseIgnoringSequence(ctx, env)
	case env.Type == contracts.OrderCancelled:
		return c.stock.HandleOrderEvent(ctx, env)
	case c.throughPool:
		return c.reserveThroughPool(ctx, env)
	case c.recordFirst:
		return c.reserveRecordFirst(ctx, env)
	case c.messageIDOnly:
		return c.reserveByMessageIDOnly(ctx, env)
	}
	switch c.strategy {
	case Naive:
		return c.reserveNaive(ctx, env)
	case CheckThenProcess:
		return c.reserveCheckThenProcess(ctx, env)
	}
	return c.stock.HandleOrderEvent(ctx, env)
}
