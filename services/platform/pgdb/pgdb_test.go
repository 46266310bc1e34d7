package pgdb_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/testenv"
	"github.com/bookstore-go/bookstore/sql"
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
			pool, err := pgdb.Open(context.Background(), admin, dbURL, pgdb.Migrations{FS: sql.Platform, VersionTable: "goose_platform_version"})
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
