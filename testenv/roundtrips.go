package testenv

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RoundTrips records what a pool sends to Postgres, an entry per round trip: the
// statement's sqlc name (or its SQL up to the first parenthesis), or a batch's joined by
// " + ". A statement's first use on a connection also prepares it, in a round trip not
// recorded here: warm the pool up before counting.
type RoundTrips struct {
	mu   sync.Mutex
	sent []string
}

// TracedPool connects to databaseURL with one connection whose round trips rt records,
// so that a test can count what one operation sends; the pool closes when the test ends.
func TracedPool(t testing.TB, databaseURL string) (*pgxpool.Pool, *RoundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	rt := &RoundTrips{}
	cfg.ConnConfig.Tracer = rt
	cfg.MaxConns = 1 // one connection: the warm-up prepares every statement on it
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, rt
}

// Reset returns what was sent since the last Reset.
func (r *RoundTrips) Reset() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	r.sent = nil
	return sent
}

func (r *RoundTrips) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, s)
}

// statementName is a statement's sqlc name, or its SQL up to the first parenthesis.
func statementName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		return strings.Fields(rest)[0]
	}
	before, _, _ := strings.Cut(sql, "(")
	return strings.TrimSpace(before)
}

func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(statementName(d.SQL))
	return ctx
}

func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	statements := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		statements[i] = statementName(q.SQL)
	}
	r.add(strings.Join(statements, " + "))
	return ctx
}

func (r *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
