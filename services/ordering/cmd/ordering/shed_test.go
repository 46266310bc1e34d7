package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/testenv"
)

// Load shedding: when no connection of ordering's database pool comes free within
// ORDERING_POOL_WAIT, a request is answered at once with 503, Retry-After and a problem
// naming the reason, and nothing is done; a request that gets a connection is served as
// usual, and a request that had one and waited on a lock is still served when the lock
// goes. The pool is two connections; the test holds them by locking the orders table
// against writes, so each POST that gets a connection waits inside its transaction.
func TestBusyPoolShedsPromptlyWithRetryAfter(t *testing.T) {
	t.Parallel()
	const poolWait = 300 * time.Millisecond
	e := newEnv(t)
	// Without the relay in this process, and without stock events to consume, the API's
	// requests are the pool's only users.
	base := startInProcess(t, e, "DATABASE_MAX_CONNS", "2", "ORDERING_POOL_WAIT", poolWait.String(), "ORDERING_RELAY", "0")
	client := &http.Client{Timeout: 10 * time.Second} // a broken shedding fails the test instead of hanging it

	post := func(key string) (status int, header http.Header, body string, took time.Duration) {
		req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(orderBody(key+"@example.com", 1)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err.Error(), time.Since(start)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b), time.Since(start)
	}
	status, _, body, _ := post("shed-first")
	if status != http.StatusCreated {
		t.Fatalf("first order: %d %s", status, body)
	}
	var first struct {
		ID string `json:"id"`
	}
	decodeJSON(t, []byte(body), &first)

	db, lock := lockOrders(t, e.databaseURL)
	ctx := context.Background()
	waiting := func() int {
		return testenv.Count(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%orders%'`)
	}
	type answer struct {
		status int
		body   string
	}
	held := make(chan answer, 2)
	hold := func(key string) {
		go func() {
			status, _, body, _ := post(key)
			held <- answer{status, body}
		}()
	}

	// One connection held: a request that gets the other one is served.
	hold("shed-held-1")
	testenv.Eventually(t, 10*time.Second, "one POST waits on the lock", func() bool { return waiting() == 1 })
	resp, err := client.Get(base + "/orders/" + first.ID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET with one connection free: %d, want 200", resp.StatusCode)
	}

	// Both held: the next request is refused after the bound, not queued.
	hold("shed-held-2")
	testenv.Eventually(t, 10*time.Second, "two POSTs wait on the lock", func() bool { return waiting() == 2 })
	status, header, body, took := post("shed-refused")
	if status != http.StatusServiceUnavailable {
		t.Fatalf("POST with every connection busy: %d after %v (%s), want 503 after about %v", status, took, body, poolWait)
	}
	if took < poolWait || took > poolWait+2*time.Second {
		t.Errorf("503 after %v, want after the pool wait of %v and promptly", took, poolWait)
	}
	if got := header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if ct := header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	for _, want := range []string{`problems.md#overloaded`, `"status":503`, "pool-exhausted", "2 of 2 in use", "nothing was done"} {
		if !strings.Contains(body, want) {
			t.Errorf("problem %s does not contain %q", body, want)
		}
	}
	// A read is refused the same way while the pool is full.
	if resp, err = client.Get(base + "/orders/" + first.ID); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("GET with every connection busy: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	// The lock goes: the two held requests were accepted and are served; the refused one
	// did nothing, and its retry with the same key places its order once.
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if a := <-held; a.status != http.StatusCreated {
			t.Errorf("held POST: %d %s, want 201", a.status, a.body)
		}
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM idempotency_keys WHERE key = 'shed-refused'"); n != 0 {
		t.Fatalf("the refused request left %d idempotency keys, want 0", n)
	}
	if status, _, body, _ := post("shed-refused"); status != http.StatusCreated {
		t.Fatalf("retry of the refused request: %d %s, want 201", status, body)
	}
	for _, key := range []string{"shed-first", "shed-held-1", "shed-held-2", "shed-refused"} {
		if n := testenv.Count(t, db, "SELECT count(*) FROM orders WHERE customer_email = $1", key+"@example.com"); n != 1 {
			t.Errorf("%s: %d orders, want 1", key, n)
		}
	}
}

// A database that cannot be reached is refused the same way, at once: 503 unavailable
// with Retry-After, not a 500 that leaves the client guessing whether its order exists.
func TestUnreachableDatabaseIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base, proxy := startBehindProxy(t, e)
	proxy.Cut()
	resp, body := postOrder(t, base, "unreachable", orderBody("gone@example.com", 1))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), "problems.md#unavailable") || !strings.Contains(string(body), "database-unreachable") {
		t.Fatalf("POST with the database unreachable: %d, Retry-After %q, %s; want 503 unavailable naming database-unreachable, with Retry-After: 1",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	proxy.Restore()
	testenv.Eventually(t, 10*time.Second, "the retry places the order once the database is back", func() bool {
		resp, _ := postOrder(t, base, "unreachable", orderBody("gone@example.com", 1))
		return resp.StatusCode == http.StatusCreated
	})
}

// A database connection that breaks under a statement (a server killed, a failover, a
// session terminated) is an outage, not a fault of the request: 503 with Retry-After,
// never a 500. The order may or may not have been placed when the break came during its
// COMMIT, so the answer says to retry with the same Idempotency-Key, which returns the
// order if it was. Each way here breaks the connection while its INSERT waits on the
// test's lock: the proxy closes it (the client reads EOF), or the server ends the session
// (pg_terminate_backend, SQLSTATE 57P01).
func TestAConnectionLostUnderAStatementIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	for name, lose := range map[string]func(t *testing.T, proxy *testenv.Proxy, db *pgxpool.Pool, pid int){
		"cut under it": func(t *testing.T, proxy *testenv.Proxy, _ *pgxpool.Pool, _ int) {
			proxy.Cut()
			t.Cleanup(proxy.Restore)
		},
		"session terminated": func(t *testing.T, _ *testenv.Proxy, db *pgxpool.Pool, pid int) {
			if _, err := db.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			base, proxy := startBehindProxy(t, e)

			db, lock := lockOrders(t, e.databaseURL)
			ctx := context.Background()
			type answer struct {
				resp *http.Response
				body []byte
			}
			answered := make(chan answer, 1)
			go func() {
				resp, body := postOrder(t, base, "lost-1", orderBody("lost@example.com", 1))
				answered <- answer{resp, body}
			}()
			var pid int
			testenv.Eventually(t, 10*time.Second, "the order's INSERT waiting on the lock", func() bool {
				err := db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%orders%'`).Scan(&pid)
				return err == nil
			})
			lose(t, proxy, db, pid)
			a := <-answered
			if a.resp.StatusCode != http.StatusServiceUnavailable || a.resp.Header.Get("Retry-After") != "1" ||
				!strings.Contains(string(a.body), "problems.md#unavailable") || !strings.Contains(string(a.body), "database-connection-lost") {
				t.Fatalf("POST whose connection broke under its INSERT: %d, Retry-After %q, %s; want 503 unavailable naming database-connection-lost, with Retry-After: 1",
					a.resp.StatusCode, a.resp.Header.Get("Retry-After"), a.body)
			}
			proxy.Restore()
			_ = lock.Rollback(ctx)
			testenv.Eventually(t, 10*time.Second, "the retry with the same key places the order", func() bool {
				resp, _ := postOrder(t, base, "lost-1", orderBody("lost@example.com", 1))
				return resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK
			})
		})
	}
}

// A statement the server cancels at its statement timeout (a lock held longer than any
// statement of ours may wait) is the database's failure, not the request's: 503 with
// Retry-After naming database-timeout, never a 500. Its transaction was rolled back, so
// nothing was done, and the same key places the order once the lock is gone.
func TestAStatementCutAtTheStatementTimeoutIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dbURL := e.databaseURL + "?statement_timeout=300"
	if strings.Contains(e.databaseURL, "?") {
		dbURL = e.databaseURL + "&statement_timeout=300"
	}
	base := startInProcess(t, e, "DATABASE_URL", dbURL, "ORDERING_RELAY", "0")
	_, lock := lockOrders(t, e.databaseURL)
	resp, body := postOrder(t, base, "timeout-1", orderBody("slow@example.com", 1))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), "problems.md#unavailable") || !strings.Contains(string(body), "database-timeout") {
		t.Fatalf("POST whose INSERT waited past the statement timeout: %d, Retry-After %q, %s; want 503 unavailable naming database-timeout, with Retry-After: 1",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	_ = lock.Rollback(context.Background())
	resp, body = postOrder(t, base, "timeout-1", orderBody("slow@example.com", 1))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the retry with the same key once the lock is gone: %d %s, want 201", resp.StatusCode, body)
	}
}

// startBehindProxy runs the service in process, without its relay, reaching its database
// through a proxy the test can cut.
func startBehindProxy(t *testing.T, e env) (base string, proxy *testenv.Proxy) {
	t.Helper()
	u, err := url.Parse(e.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy = testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	return startInProcess(t, e, "DATABASE_URL", u.String(), "ORDERING_RELAY", "0"), proxy
}

// lockOrders takes a SHARE lock on the orders table of the database at databaseURL, in a
// transaction of the test's own that it rolls back when the test ends: reads go through,
// every INSERT waits. It returns the test's pool and the transaction.
func lockOrders(t *testing.T, databaseURL string) (*pgxpool.Pool, pgx.Tx) {
	t.Helper()
	db := testenv.Pool(t, databaseURL)
	ctx := context.Background()
	lock, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	if _, err := lock.Exec(ctx, "LOCK TABLE orders IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	return db, lock
}
