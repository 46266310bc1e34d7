package stock_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// A snapshot held open keeps every version of a row written after it began, and a read
// of the row goes through them all. A book's stock changes with every reservation, so a
// report left open beside the load would make each reservation dearer than the last
// (the two-hour soak's long_transaction: 95,000 versions of ten rows, a lookup of 61-267
// ms). So a book's stock must cost no more to read however many reservations a snapshot
// has outlived: measured after 400 of them (every index as deep as it will be for a
// while) and again after 1,200 more, each time after an ANALYZE, as autovacuum runs it
// under a held snapshot too (this machine's server runs none): the planner must choose
// the key by the statistics of the live levels, which know nothing of the dead ones.
func TestAReservationReadsNoMorePagesTheMoreReservationsAHeldSnapshotOutlives(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := database(t, 1) // one connection, whose statistics pagesReadByReservations flushes
	svc := service(t, pool)
	if _, err := pool.Exec(ctx, "UPDATE stock_levels SET on_hand = 1000000 WHERE book_id = $1", neuromancer); err != nil {
		t.Fatal(err)
	}

	report, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close(context.Background())
	if _, err := report.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := report.Exec(ctx, "SELECT count(*) FROM reservations"); err != nil {
		t.Fatal(err)
	}

	reserve := func() {
		t.Helper()
		o, err := svc.HandleOrderEvent(ctx, orderPlaced(t, contracts.Line{BookID: neuromancer, Quantity: 1}))
		if err != nil || o != inbox.Processed {
			t.Fatalf("reservation: %v, %v", o, err)
		}
	}
	for range 400 {
		reserve()
	}
	analyze := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
			t.Fatal(err)
		}
	}
	analyze()
	before := pagesReadByReservations(t, pool, 3, reserve)
	for range 1200 {
		reserve()
	}
	analyze()
	after := pagesReadByReservations(t, pool, 3, reserve)
	t.Logf("pages of the stock's tables and indexes read per reservation under the snapshot: %.1f after 400 reservations, %.1f after 1,600", before, after)
	if after > before*1.1+1 {
		t.Fatalf("a reservation read %.1f pages of the stock after 1,600 reservations under a held snapshot, %.1f after 400: its reads go through the versions the snapshot keeps", after, before)
	}
	if got := reserved(t, pool, neuromancer); got != 1606 {
		t.Fatalf("Neuromancer has %d copies reserved, want 1606", got)
	}
}

// pagesReadByReservations is how many pages of the stock's tables and their indexes
// (shared buffers hit or read) one reservation reads, averaged over n of them. pool has
// one connection: pg_stat_force_next_flush makes it publish its counts before the next
// read of them.
func pagesReadByReservations(t *testing.T, pool *pgxpool.Pool, n int, reserve func()) float64 {
	t.Helper()
	read := func() int64 {
		t.Helper()
		if _, err := pool.Exec(t.Context(), "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		var pages int64
		if err := pool.QueryRow(t.Context(), `
			SELECT coalesce(sum(coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0) + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)), 0)::bigint
			FROM pg_statio_user_tables WHERE relname IN ('books', 'stock_levels')`).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		return pages
	}
	start := read()
	for range n {
		reserve()
	}
	return float64(read()-start) / float64(n)
}
