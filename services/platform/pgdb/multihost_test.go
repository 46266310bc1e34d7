package pgdb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// withDeadPrimaryFirst returns rawURL as a failover would find it: a host that is down
// (an IPv6 one, which net/url cannot parse among several) listed before the live one,
// and only a read-write server accepted.
func withDeadPrimaryFirst(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
	u.Host = "[::1]:" + port + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	return u.String()
}

// A service given multi-host DATABASE_URL and DATABASE_ADMIN_URL, the first host down,
// creates its role (with the URL's password) and database, migrates and serves on the
// next host, with the pool size DATABASE_MAX_CONNS asks for.
func TestAServiceOpensMigratesAndServesThroughTheNextHostOfAMultiHostURL(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb_multi")
	u, _ := url.Parse(dbURL)
	u.User = url.UserPassword(u.User.Username(), "multi-host-pw")
	common := config.Common{DatabaseURL: withDeadPrimaryFirst(t, u.String()), DatabaseMaxConns: 3}
	ctx := context.Background()
	pool, err := pgdb.Open(ctx, withDeadPrimaryFirst(t, admin), common.PoolURL(), pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatalf("open through %s: %v", common.PoolURL(), err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 3 {
		t.Errorf("pool of %d connections, want DATABASE_MAX_CONNS 3", got)
	}
	var tables int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('outbox', 'inbox')").Scan(&tables); err != nil || tables != 2 {
		t.Errorf("tables = %d (%v), want outbox and inbox", tables, err)
	}
	check := testenv.Pool(t, admin)
	if n := testenv.Count(t, check, "SELECT count(*) FROM pg_authid WHERE rolname = $1 AND rolpassword IS NOT NULL", u.User.Username()); n != 1 {
		t.Errorf("role %s has no password: the multi-host URL's password was lost", u.User.Username())
	}
}

// A connection that breaks under a statement (the primary died, a failover moved it) is
// transient: the same work on a new connection may succeed. A constraint violation or a
// plain error is not.
func TestALostConnectionIsTransientAndAViolationIsNot(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("exec: %w", pgconn.ErrConnClosed), true},
		{fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{errors.New("the handler's own failure"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := pgdb.Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A first host that takes the connection and then never answers (a partitioned node, a
// dead primary's address behind a load balancer) costs each connection ConnectTimeout,
// not forever: the service opens on the next host.
func TestAHostThatNeverAnswersCostsAConnectionTheConnectTimeoutNotForever(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb_stall")
	silent, err := net.Listen("tcp", testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held <- c // never read, never answered, closed when the test ends
		}
	}()
	t.Cleanup(func() {
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	})
	u, _ := url.Parse(dbURL)
	u.Host = silent.Addr().String() + "," + u.Host
	ctx, cancel := context.WithTimeout(context.Background(), 4*pgdb.ConnectTimeout)
	defer cancel()
	start := time.Now()
	pool, err := pgdb.Open(ctx, admin, u.String())
	if err != nil {
		t.Fatalf("open with a silent first host: %v (after %v)", err, time.Since(start))
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
