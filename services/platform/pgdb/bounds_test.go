package pgdb_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// Every connection of a service carries the session bounds on the server's side (here in
// pg_settings' units: milliseconds and seconds), unless the URL sets one itself.
func TestAServicesSessionsCarryTheirBoundsOnTheServer(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	pool := open(t, admin, dbURL)
	for name, want := range map[string]string{
		"idle_in_transaction_session_timeout": "30000",
		"tcp_keepalives_idle":                 "10",
		"tcp_keepalives_interval":             "5",
		"tcp_keepalives_count":                "3",
		"tcp_user_timeout":                    "30000",
		"statement_timeout":                   "5000",
	} {
		var got string
		if err := pool.QueryRow(context.Background(), "SELECT setting FROM pg_settings WHERE name = $1", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %s on a service's session, want %s", name, got, want)
		}
	}

	own := open(t, admin, dbURL+sep(dbURL)+"idle_in_transaction_session_timeout=5000")
	var got string
	if err := own.QueryRow(context.Background(), "SELECT setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&got); err != nil || got != "5000" {
		t.Errorf("idle_in_transaction_session_timeout = %s (%v) with the URL's own 5000, want 5000", got, err)
	}
}

// A transaction of ours that sits idle (a client hung, or its link broken on the
// client's side only) is ended by the server after the bound, and the lock it held is
// free again: without the bound, the lock would wait for the server's TCP keepalive,
// two hours and more.
func TestTheServerEndsATransactionLeftIdleAndFreesItsLocks(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	pool := open(t, admin, dbURL+sep(dbURL)+"idle_in_transaction_session_timeout=300")
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(42)"); err != nil {
		t.Fatal(err)
	}
	other := testenv.Pool(t, dbURL)
	testenv.Eventually(t, 10*time.Second, "the lock free again", func() bool {
		var got bool
		if err := other.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got {
			_, _ = other.Exec(ctx, "SELECT pg_advisory_unlock_all()")
		}
		return got
	})
	_, err = tx.Exec(ctx, "SELECT 1")
	var pgErr *pgconn.PgError
	if err == nil || (!errors.As(err, &pgErr) && !pgdb.LostConnection(err)) {
		t.Errorf("the idle transaction's next statement: %v, want the session ended", err)
	}
}

// A service's TCP connection to Postgres gives up data left unacknowledged after
// UserTimeout, where keepalive, which probes only an idle link, would never look.
func TestAServicesConnectionGivesUpUnacknowledgedDataAfterTheUserTimeout(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	conn, err := open(t, admin, dbURL).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tcp, ok := conn.Conn().PgConn().Conn().(*net.TCPConn)
	if !ok {
		t.Fatalf("the pool's connection is a %T, want TCP (TEST_DATABASE_ADMIN_URL names a host)", conn.Conn().PgConn().Conn())
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var serr error
	if err := raw.Control(func(fd uintptr) { got, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if want := int(pgdb.UserTimeout.Milliseconds()); got != want {
		t.Errorf("TCP_USER_TIMEOUT = %d ms, want %d", got, want)
	}
}

// A session of a service's role is bounded by the server even when its client sets
// nothing (psql, a one-off tool, a driver without pgdb's parameters): the bounds are the
// role's own settings, which every session of it starts with.
func TestASessionOfAServicesRoleIsBoundedEvenWhenItsClientSetsNothing(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	open(t, admin, dbURL) // creates the role, as a service's start does
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL) // plain pgx: no runtime parameters of pgdb's
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for name, want := range map[string]string{
		"idle_in_transaction_session_timeout": "30000",
		"statement_timeout":                   "5000",
	} {
		var got, source string
		if err := conn.QueryRow(ctx, "SELECT setting, source FROM pg_settings WHERE name = $1", name).Scan(&got, &source); err != nil {
			t.Fatal(err)
		}
		if got != want || source != "user" {
			t.Errorf("%s = %s (source %s) on a bare session of the role, want %s set on the role (source user)", name, got, source, want)
		}
	}
	start := time.Now()
	_, err = conn.Exec(ctx, "SELECT pg_sleep(30)")
	if !pgdb.TimedOut(err) || time.Since(start) > 20*time.Second {
		t.Errorf("a 30 s statement of the role's bare session: %v after %v, want cancelled by the statement timeout (57014) after %v",
			err, time.Since(start).Round(time.Millisecond), pgdb.StatementTimeout)
	}
}

// Migrations run without the statement timeout: a migration may rewrite a table for
// longer than any statement of the services' traffic may take, and one cut off half-way
// on a start would leave the service unable to start at all.
func TestMigrationsRunWithoutTheStatementTimeout(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	migrations := fstest.MapFS{"00001_seen.sql": {Data: []byte(`-- +goose Up
CREATE TABLE seen AS SELECT current_setting('statement_timeout') AS statement_timeout;
`)}}
	pool := open(t, admin, dbURL, pgdb.Migrations{FS: migrations, VersionTable: "goose_seen_version"})
	var got string
	if err := pool.QueryRow(context.Background(), "SELECT statement_timeout FROM seen").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "0" {
		t.Errorf("statement_timeout = %s inside a migration, want 0 (none)", got)
	}
	var traffic string
	if err := pool.QueryRow(context.Background(), "SHOW statement_timeout").Scan(&traffic); err != nil || traffic != "5s" {
		t.Errorf("statement_timeout = %s (%v) on the pool the migrations left for traffic, want 5s", traffic, err)
	}
}

// A statement the server cancelled at its statement timeout (57014) is transient, not an
// outage of the database nor a failure of the work itself: the transaction it cut was
// rolled back whole, and the same work may well finish once whatever it waited on (a
// lock, a burst of load) is gone. The caller retries the transaction.
func TestAStatementCutByTheStatementTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb")
	pool := open(t, admin, dbURL+sep(dbURL)+"statement_timeout=100")
	_, err := pool.Exec(context.Background(), "SELECT pg_sleep(10)")
	if !pgdb.TimedOut(err) || !pgdb.Transient(err) || pgdb.Refused(err) || pgdb.LostConnection(err) {
		t.Errorf("%v: TimedOut %v, Transient %v, Refused %v, LostConnection %v; want timed out and transient only",
			err, pgdb.TimedOut(err), pgdb.Transient(err), pgdb.Refused(err), pgdb.LostConnection(err))
	}
}

// sep is what joins one more parameter to rawURL.
func sep(rawURL string) string {
	if strings.Contains(rawURL, "?") {
		return "&"
	}
	return "?"
}

// open opens a service's pool on the database at databaseURL, closed when the test ends.
func open(t *testing.T, adminURL, databaseURL string, sets ...pgdb.Migrations) *pgxpool.Pool {
	t.Helper()
	pool, err := pgdb.Open(context.Background(), adminURL, databaseURL, sets...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
