package pgdb_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// Several instances of a service start at once on an empty server: each creates the role
// and database if missing, none fails because another got there first, and migrations
// run once.
func TestOpenIsSafeToRunConcurrently(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := pgdb.Open(context.Background(), admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
			if err != nil {
				errs <- err
				return
			}
			pool.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent start: %v", err)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var tables int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('outbox', 'inbox')").Scan(&tables); err != nil || tables != 2 {
		t.Errorf("tables = %d (%v), want outbox and inbox", tables, err)
	}
}

// A service's role cannot even connect to another service's database.
func TestRolesCannotReachEachOthersDatabases(t *testing.T) {
	t.Parallel()
	admin, aURL := testenv.Database(t, "pgdb_a")
	_, bURL := testenv.Database(t, "pgdb_b")
	for _, u := range []string{aURL, bURL} {
		pool, err := pgdb.Open(context.Background(), admin, u)
		if err != nil {
			t.Fatal(err)
		}
		pool.Close()
	}
	cfgA, _ := pgx.ParseConfig(aURL)
	cfgB, _ := pgx.ParseConfig(bURL)
	cross := strings.Replace(aURL, "/"+cfgA.Database, "/"+cfgB.Database, 1)
	conn, err := pgx.Connect(context.Background(), cross)
	if err == nil {
		conn.Close(context.Background())
		t.Fatalf("role %s connected to database %s", cfgA.User, cfgB.Database)
	}
	if !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("want permission denied, got %v", err)
	}
}

// A clean-up deletes in batches until a batch comes back short, and does nothing while
// another instance holds its lock.
func TestDeleteInBatchesStopsAtAShortBatchAndYieldsToAnotherInstance(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	ctx := context.Background()
	pool, err := pgdb.Open(ctx, admin, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE old (n int); INSERT INTO old SELECT generate_series(1, 2500)"); err != nil {
		t.Fatal(err)
	}
	const lockKey = 42
	var batches int
	deleteBatch := func(tx pgx.Tx, batch int) (int64, error) {
		batches++
		tag, err := tx.Exec(ctx, "DELETE FROM old WHERE n IN (SELECT n FROM old LIMIT $1)", batch)
		return tag.RowsAffected(), err
	}

	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	if n, err := pgdb.DeleteInBatches(ctx, pool, lockKey, 1000, deleteBatch); n != 0 || err != nil || batches != 0 {
		t.Errorf("while another instance holds the lock: deleted %d in %d batches (%v), want nothing", n, batches, err)
	}
	_ = holder.Rollback(ctx)

	if n, err := pgdb.DeleteInBatches(ctx, pool, lockKey, 1000, deleteBatch); n != 2500 || err != nil || batches != 3 {
		t.Errorf("deleted %d in %d batches (%v), want 2500 in 3", n, batches, err)
	}
}
