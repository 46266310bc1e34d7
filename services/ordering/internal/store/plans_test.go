package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv/plan"
)

// Every query ordering runs on a request or an outcome reaches its rows through an index
// by its key, with a day of orders behind it: their lines, idempotency keys and history,
// a tenth of them cancelled, the last 1,000 pending.
func TestOrderingsQueriesReadNoTableOrIndexWhole(t *testing.T) {
	pool := historyDatabase(t)
	ctx := t.Context()
	var confirmed, cancelled uuid.UUID
	var pending []uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT id FROM orders WHERE status = 'confirmed' ORDER BY id OFFSET 50000 LIMIT 1),
		(SELECT id FROM orders WHERE status = 'cancelled' ORDER BY id OFFSET 5000 LIMIT 1),
		(SELECT array_agg(id) FROM (SELECT id FROM orders WHERE status = 'pending' LIMIT 16) p)`).Scan(&confirmed, &cancelled, &pending); err != nil {
		t.Fatal(err)
	}
	outcomes := make([]string, len(pending))
	for i := range outcomes {
		outcomes[i] = "confirmed"
	}
	const (
		orders    = "orders_pkey"
		keys      = "idempotency_keys_pkey"
		cancelKey = "cancel_idempotency_keys_pkey"
	)
	retention := (24 * time.Hour).Seconds() // IDEMPOTENCY_KEY_RETENTION's default
	queries := []plan.Query{
		{Name: "GetOrder", SQL: getOrder, Args: []any{confirmed}, Reads: map[string][]string{"orders": {orders}}},
		{Name: "ListOrderLines", SQL: listOrderLines, Args: []any{confirmed}, Reads: map[string][]string{"order_lines": {"order_lines_pkey"}}},
		{Name: "GetIdempotencyKey", SQL: getIdempotencyKey, Args: []any{"place-" + confirmed.String()},
			Reads: map[string][]string{"idempotency_keys": {keys}}},
		{Name: "ApplyStockOutcome", SQL: applyStockOutcome, Args: []any{"confirmed", pending[0]}, Reads: map[string][]string{"orders": {orders}}},
		{Name: "ApplyStockOutcomes", SQL: applyStockOutcomes, Args: []any{pending, outcomes}, Reads: map[string][]string{"orders": {orders}}},
		{Name: "CancelOrder", SQL: cancelOrder, Args: []any{time.Now(), confirmed}, Reads: map[string][]string{"orders": {orders}}},
		{Name: "ListOrderHistory", SQL: listOrderHistory, Args: []any{cancelled},
			Reads: map[string][]string{"order_history": {"order_history_pkey"}}},
		{Name: "GetCancelIdempotencyKey", SQL: getCancelIdempotencyKey, Args: []any{"cancel-" + cancelled.String()},
			Reads: map[string][]string{"cancel_idempotency_keys": {cancelKey}}},
		{Name: "DeleteExpiredIdempotencyKeys", SQL: deleteExpiredIdempotencyKeys, Args: []any{retention, int32(1000)},
			Reads: map[string][]string{"idempotency_keys": {"idempotency_keys_created_at", keys}}},
		{Name: "DeleteExpiredCancelIdempotencyKeys", SQL: deleteExpiredCancelIdempotencyKeys, Args: []any{retention, int32(1000)},
			Reads: map[string][]string{"cancel_idempotency_keys": {"cancel_idempotency_keys_created_at", cancelKey}}},
	}
	plan.Check(t, pool, queries...)
}

// historyDatabase is a database with ordering's tables and plan.Rows orders placed
// over the last 24 hours (IDEMPOTENCY_KEY_RETENTION), analysed as autovacuum would have:
// two lines and a key each, a tenth cancelled with a cancel key, the last 1,000
// pending, and each order's history.
func historyDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	migrations := []pgdb.Migrations{
		{FS: schema.Platform, VersionTable: "goose_platform_version"},
		{FS: schema.Ordering, VersionTable: "goose_ordering_version"},
	}
	n := fmt.Sprint(plan.Rows)
	return plan.History(t, migrations,
		`INSERT INTO orders (id, customer_email, status, version, created_at, updated_at)
		 SELECT pg_temp.id_at(ts), 'customer-' || g % 5000 || '@example.com', s.status, s.version, ts, ts
		 FROM generate_series(0, `+n+` - 1) g,
		      LATERAL (SELECT now() - interval '24 hours' * (1 - g::float8 / `+n+`) AS ts) t,
		      LATERAL (SELECT CASE WHEN g >= `+n+` - 1000 THEN 'pending' WHEN g % 10 = 0 THEN 'cancelled' WHEN g % 10 = 1 THEN 'rejected' ELSE 'confirmed' END AS status,
		                      CASE WHEN g >= `+n+` - 1000 THEN 1 WHEN g % 10 = 0 THEN 3 ELSE 2 END AS version) s`,
		`INSERT INTO order_lines (order_id, book_id, quantity)
		 SELECT id, format('018f2b1e-0000-7000-8000-%s', lpad((b + i)::text, 12, '0'))::uuid, 1
		 FROM orders, LATERAL (SELECT abs(hashtext(id::text)) % 9 + 1 AS b) h, generate_series(0, 1) i`,
		`INSERT INTO idempotency_keys (key, request_hash, order_id, response_status, response_body, created_at)
		 SELECT 'place-' || id, '\x00', id, 201, '{}', created_at FROM orders`,
		`INSERT INTO cancel_idempotency_keys (key, request_hash, order_id, response_status, response_body, created_at)
		 SELECT 'cancel-' || id, '\x00', id, 200, '{}', created_at + interval '1 minute' FROM orders WHERE status = 'cancelled'`,
		`INSERT INTO order_history (order_id, event, at)
		 SELECT id, e, created_at FROM orders, unnest(CASE status
		   WHEN 'pending' THEN '{placed}'::text[] WHEN 'cancelled' THEN '{placed,confirmed,cancelled,released}' ELSE ARRAY['placed', status] END) e`,
	)
}
