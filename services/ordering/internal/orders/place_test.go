package orders_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/testenv"
	"github.com/bookstore-go/bookstore/sql"
)

// What one order costs in round trips to Postgres, the figure that bounds POST /orders at
// low concurrency. The statements of each round trip are named as sqlc names them.
func TestPlacingAnOrderCostsFiveRoundTripsAndAReplayThree(t *testing.T) {
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "ordering")
	migrated, err := pgdb.Open(ctx, admin, dbURL,
		pgdb.Migrations{FS: sql.Platform, VersionTable: "goose_platform_version"},
		pgdb.Migrations{FS: sql.Ordering, VersionTable: "goose_ordering_version"})
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sent := &roundTrips{}
	cfg.ConnConfig.Tracer = sent
	cfg.MaxConns = 1 // one connection, whose statements the warm-up prepares
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	svc := orders.NewService(pool, noop.NewTracerProvider().Tracer(""), slog.New(slog.DiscardHandler), nil, 1)

	req := orders.PlaceOrderRequest{
		CustomerEmail: "ada@example.com",
		Lines:         []orders.PlaceOrderLine{{BookID: "018f2b1e-0000-7000-8000-000000000001", Quantity: 2}},
	}
	for _, key := range []string{"warm-up", "warm-up", ""} {
		if _, err := svc.PlaceOrder(ctx, key, req); err != nil {
			t.Fatal(err)
		}
	}

	const (
		lockAndLookup = "SELECT pg_try_advisory_xact_lock + GetIdempotencyKey"
		inserts       = "InsertOrder + InsertOrderLines"
	)
	for _, c := range []struct {
		name, key string
		replayed  bool
		want      []string
	}{
		{"a new order with a key", "k", false, []string{"begin", lockAndLookup, inserts + " + InsertIdempotencyKey", "InsertOutbox", "commit"}},
		{"its replay", "k", true, []string{"begin", lockAndLookup, "commit"}},
		{"a new order without a key", "", false, []string{"begin", inserts, "InsertOutbox", "commit"}},
	} {
		sent.reset()
		placed, err := svc.PlaceOrder(ctx, c.key, req)
		if err != nil || placed.Replayed != c.replayed {
			t.Fatalf("%s: %v, replayed %v", c.name, err, placed.Replayed)
		}
		if got := sent.reset(); !slices.Equal(got, c.want) {
			t.Errorf("%s: round trips\n\t%s\nwant\n\t%s", c.name, strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"))
		}
	}
}

// roundTrips is a pgx tracer that records what a pool sends to Postgres, an entry per
// round trip: the statement, or a batch's statements joined by " + ". (A statement's
// first use on a connection also prepares it, in a round trip not recorded here.)
type roundTrips struct {
	mu   sync.Mutex
	sent []string
}

// name is a statement's sqlc name, or its SQL up to the first parenthesis.
func name(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		return strings.Fields(rest)[0]
	}
	before, _, _ := strings.Cut(sql, "(")
	return strings.TrimSpace(before)
}

func (r *roundTrips) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, s)
}

// reset returns what was sent since the last reset.
func (r *roundTrips) reset() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	r.sent = nil
	return sent
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(name(d.SQL))
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	statements := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		statements[i] = name(q.SQL)
	}
	r.add(strings.Join(statements, " + "))
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
