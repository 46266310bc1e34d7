package store

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv/plan"
)

// Every query inventory runs on a placement or a cancellation reaches its rows through an
// index by its key, with the answers and reservations of 72 hours of orders behind it.
// The books are the catalogue, which stays small whatever the history.
func TestInventorysQueriesReadNoTableOrIndexWhole(t *testing.T) {
	pool := historyDatabase(t)
	ctx := t.Context()
	var reserved uuid.UUID
	var books []uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT order_id, array_agg(book_id ORDER BY book_id) FROM reservations
		WHERE order_id = (SELECT order_id FROM order_answers WHERE outcome = 'reserved' AND cancelled_at IS NULL ORDER BY order_id OFFSET 50000 LIMIT 1)
		GROUP BY order_id`).Scan(&reserved, &books); err != nil {
		t.Fatal(err)
	}
	batch := make([]uuid.UUID, 16) // a consumer batch's new orders
	for i := range batch {
		batch[i] = uuid.Must(uuid.NewV7())
	}
	outcomes := slices.Repeat([]string{"reserved"}, len(batch))
	quantities := slices.Repeat([]int32{1}, len(books))
	answers := map[string][]string{"order_answers": {"order_answers_pkey"}}
	lines := map[string][]string{"reservations": {"reservations_pkey"}}
	catalogue := []string{"books"}
	levels := map[string][]string{"stock_levels": {"stock_levels_pkey"}}
	queries := []plan.Query{
		{Name: "GetOrderAnswer", SQL: getOrderAnswer, Args: []any{reserved}, Reads: answers},
		{Name: "ListOrderReservations", SQL: listOrderReservations, Args: []any{reserved}, Reads: lines},
		{Name: "ListReservations", SQL: listReservations, Args: []any{reserved}, Reads: lines},
		{Name: "DeleteReservations", SQL: deleteReservations, Args: []any{reserved}, Reads: lines},
		// The inserts' conflicts are found through the arbiter index outside the plan:
		// these guard against a read added to them.
		{Name: "RecordAnswer", SQL: recordAnswer, Args: []any{batch[0], "reserved"}, Reads: answers},
		{Name: "RecordAnswers", SQL: recordAnswers, Args: []any{batch, outcomes}, Reads: answers},
		{Name: "RecordCancellation", SQL: recordCancellation, Args: []any{reserved, int64(2)}, Reads: answers},
		{Name: "LockBooks", SQL: lockBooks, Args: []any{books}, Small: catalogue},
		// The newest of an hour of levels, by the key read backwards: the first entry is the
		// live row, whatever a held snapshot keeps behind it.
		{Name: "StockOf", SQL: stockOf, Args: []any{books}, Reads: levels},
		{Name: "AddReserved", SQL: addReserved, Args: []any{books, quantities}, Reads: levels},
		{Name: "SetOnHand", SQL: setOnHand, Args: []any{books[0], int32(1000)}, Reads: levels},
		{Name: "DeleteReplacedLevels", SQL: deleteReplacedLevels, Args: []any{float64(3600), int32(1000)},
			Reads: map[string][]string{"stock_levels": {"stock_levels_changed_at", "stock_levels_pkey"}}},
	}
	plan.Check(t, pool, queries...)
}

// historyDatabase is a database with inventory's tables, its catalogue of ten books and
// the answers to plan.Rows orders over the last 72 hours, analysed as autovacuum would
// have: a tenth rejected, a tenth reserved then cancelled, one in a thousand cancelled
// before it was placed, and two reserved lines for each order still reserved; and an
// hour of stock levels, 30 changes a second over the ten books (LevelRetention's).
func historyDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	migrations := []pgdb.Migrations{
		{FS: schema.Platform, VersionTable: "goose_platform_version"},
		{FS: schema.Inventory, VersionTable: "goose_inventory_version"},
	}
	n := fmt.Sprint(plan.Rows)
	return plan.History(t, migrations,
		`INSERT INTO order_answers (order_id, outcome, answered_at, last_sequence, cancelled_at)
		 SELECT pg_temp.id_at(ts), CASE WHEN g % 1000 = 2 THEN 'cancelled' WHEN g % 10 = 1 THEN 'rejected' ELSE 'reserved' END, ts,
		        CASE WHEN g % 10 = 0 OR g % 1000 = 2 THEN 2 ELSE 1 END, CASE WHEN g % 10 = 0 OR g % 1000 = 2 THEN ts + interval '1 minute' END
		 FROM generate_series(0, `+n+` - 1) g, LATERAL (SELECT now() - interval '72 hours' * (1 - g::float8 / `+n+`) AS ts) t`,
		`INSERT INTO reservations (order_id, book_id, quantity, created_at)
		 SELECT order_id, format('018f2b1e-0000-7000-8000-%s', lpad((b + i)::text, 12, '0'))::uuid, 1, answered_at
		 FROM order_answers, LATERAL (SELECT abs(hashtext(order_id::text)) % 9 + 1 AS b) h, generate_series(0, 1) i
		 WHERE outcome = 'reserved' AND cancelled_at IS NULL`,
		`INSERT INTO stock_levels (book_id, version, on_hand, reserved, changed_at)
		 SELECT l.book_id, v, l.on_hand, 0, now() - interval '1 hour' * (1 - v::float8 / 10800)
		 FROM stock_levels l, generate_series(2, 10800) v`,
	)
}
