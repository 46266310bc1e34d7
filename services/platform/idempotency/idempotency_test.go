package idempotency_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// keys is a service's table of keys, as ordering and the email provider each have one.
func keys(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := keysAt(t)
	return pool
}

// keysAt is keys, with the URL of its database.
func keysAt(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	admin, dbURL := testenv.Database(t, "idem")
	pool, err := pgdb.Open(context.Background(), admin, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE keys (key text PRIMARY KEY, hash bytea NOT NULL, response bytea NOT NULL);
		CREATE TABLE work (n int)`); err != nil {
		t.Fatal(err)
	}
	return pool, dbURL
}

// request runs one request of key through Do, in a transaction of its own. inWork, if not
// nil, is called while the work holds the key, before it commits.
func request(ctx context.Context, pool *pgxpool.Pool, key string, body any, inWork func()) (idempotency.Result, error) {
	hash, err := idempotency.Hash(body)
	if err != nil {
		return idempotency.Result{}, err
	}
	var res idempotency.Result
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		lookup := func(db *idempotency.LookupDB) (idempotency.Stored, error) {
			var s idempotency.Stored
			err := db.QueryRow(ctx, "SELECT hash, response FROM keys WHERE key = $1", key).Scan(&s.RequestHash, &s.Response)
			return s, err
		}
		work := func() ([]byte, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO work VALUES (1)"); err != nil {
				return nil, err
			}
			resp := []byte(`{"done":true}`)
			if _, err := tx.Exec(ctx, "INSERT INTO keys VALUES ($1, $2, $3)", key, hash, resp); err != nil {
				return nil, err
			}
			if inWork != nil {
				inWork()
			}
			return resp, nil
		}
		var err error
		res, err = idempotency.Do(ctx, tx, idempotency.Key{Scope: "test", Key: key, RequestHash: hash}, lookup, work)
		return err
	})
	return res, err
}

// While the first request of a key is at work, a copy is told it is in flight and does
// nothing; after it committed, the same body is replayed and another body refused.
func TestAKeyIsWorkedOnceInFlightThenReplayedOrRefused(t *testing.T) {
	pool := keys(t)
	ctx := context.Background()
	body := map[string]int{"n": 1}

	inWork, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := request(ctx, pool, "k", body, func() { close(inWork); <-release })
		first <- err
	}()
	select {
	case <-inWork:
	case err := <-first:
		t.Fatalf("the first request ended before its work: %v", err)
	}
	if _, err := request(ctx, pool, "k", body, nil); !errors.Is(err, idempotency.ErrInFlight) {
		t.Errorf("a copy while the first is at work: %v, want ErrInFlight", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}

	res, err := request(ctx, pool, "k", body, nil)
	if err != nil || !res.Replayed || string(res.Response) != `{"done":true}` {
		t.Errorf("after the first committed: %+v %v, want a replay of its response", res, err)
	}
	if _, err := request(ctx, pool, "k", map[string]int{"n": 2}, nil); !errors.Is(err, idempotency.ErrMismatch) {
		t.Errorf("another body under the key: %v, want ErrMismatch", err)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM work"); n != 1 {
		t.Errorf("work done %d times, want 1", n)
	}
}

// Replays of a finished request look the key up before any lock, so fifty at once are all
// replays, not 409s for a request that finished long ago.
func TestFiftyConcurrentReplaysOfAFinishedKeyAreAllReplays(t *testing.T) {
	pool := keys(t)
	ctx := context.Background()
	body := map[string]int{"n": 1}
	if _, err := request(ctx, pool, "k", body, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := request(ctx, pool, "k", body, nil)
			if err == nil && !res.Replayed {
				err = errors.New("not a replay")
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replay %d: %v", i, err)
		}
	}
}

// The lock and the lookup go to Postgres in one round trip, for a new key and for a
// replay alike; the rest are the work's statements and the transaction's own.
func TestTheLockAndTheLookupShareOneRoundTrip(t *testing.T) {
	_, dbURL := keysAt(t)
	ctx := context.Background()
	pool, sent := testenv.TracedPool(t, dbURL)
	body := map[string]int{"n": 1}
	if _, err := request(ctx, pool, "warm-up", body, nil); err != nil {
		t.Fatal(err)
	}

	const lockAndLookup = "SELECT pg_try_advisory_xact_lock + SELECT hash, response FROM keys WHERE key = $1"
	for _, c := range []struct {
		name string
		want []string
	}{
		{"new key", []string{"begin", lockAndLookup, "INSERT INTO work VALUES", "INSERT INTO keys VALUES", "commit"}},
		{"replay", []string{"begin", lockAndLookup, "commit"}},
	} {
		sent.Reset()
		if _, err := request(ctx, pool, "k", body, nil); err != nil {
			t.Fatal(err)
		}
		if got := sent.Reset(); !slices.Equal(got, c.want) {
			t.Errorf("%s: round trips\n\t%s\nwant\n\t%s", c.name, strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"))
		}
	}
}

// A lookup that sends no query, or more than its one QueryRow, is refused: it would
// otherwise decide without the lock, or read past the batch.
func TestALookupIsExactlyOneQueryRow(t *testing.T) {
	pool := keys(t)
	ctx := context.Background()
	const query = "SELECT hash, response FROM keys WHERE key = $1"
	for name, lookup := range map[string]func(db *idempotency.LookupDB) (idempotency.Stored, error){
		"no query": func(*idempotency.LookupDB) (idempotency.Stored, error) {
			return idempotency.Stored{}, pgx.ErrNoRows
		},
		"an Exec": func(db *idempotency.LookupDB) (idempotency.Stored, error) {
			_, err := db.Exec(ctx, query, "k")
			return idempotency.Stored{}, err
		},
		"two QueryRows": func(db *idempotency.LookupDB) (idempotency.Stored, error) {
			var s idempotency.Stored
			if err := db.QueryRow(ctx, query, "k").Scan(&s.RequestHash, &s.Response); !errors.Is(err, pgx.ErrNoRows) {
				return s, err
			}
			return s, db.QueryRow(ctx, query, "k").Scan(&s.RequestHash, &s.Response)
		},
	} {
		worked := false
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := idempotency.Do(ctx, tx, idempotency.Key{Scope: "test", Key: "k"}, lookup, func() ([]byte, error) {
				worked = true
				return nil, nil
			})
			return err
		})
		if err == nil || errors.Is(err, idempotency.ErrInFlight) || worked {
			t.Errorf("%s: %v (worked: %v), want an error and no work", name, err, worked)
		}
	}
}

// BeginAndDo sends BEGIN in the round trip of the lock and the lookup, and leaves the
// transaction it began to the caller; a BEGIN that fails, on a connection already gone,
// is ErrNotBegun.
func TestBeginAndDoBeginsTheTransactionInTheLookupsRoundTrip(t *testing.T) {
	_, dbURL := keysAt(t)
	ctx := context.Background()
	pool, sent := testenv.TracedPool(t, dbURL)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	lookup := func(db *idempotency.LookupDB) (idempotency.Stored, error) {
		var s idempotency.Stored
		err := db.QueryRow(ctx, "SELECT hash, response FROM keys WHERE key = $1", "k").Scan(&s.RequestHash, &s.Response)
		return s, err
	}
	work := func() ([]byte, error) {
		_, err := conn.Exec(ctx, "INSERT INTO work VALUES (1)")
		return nil, err
	}
	sent.Reset()
	if _, err := idempotency.BeginAndDo(ctx, conn, idempotency.Key{Scope: "test", Key: "k"}, lookup, work); err != nil {
		t.Fatal(err)
	}
	if status := conn.Conn().PgConn().TxStatus(); status != 'T' {
		t.Errorf("after BeginAndDo the transaction status is %q, want 'T': begun, and left to the caller", status)
	}
	if _, err := conn.Exec(ctx, "rollback"); err != nil {
		t.Fatal(err)
	}
	want := []string{"begin + SELECT pg_try_advisory_xact_lock + SELECT hash, response FROM keys WHERE key = $1", "INSERT INTO work VALUES", "rollback"}
	if got := sent.Reset(); !slices.Equal(got, want) {
		t.Errorf("round trips\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}

	gone, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	_ = gone.Close(ctx)
	if _, err := idempotency.BeginAndDo(ctx, gone, idempotency.Key{Scope: "test", Key: "k"}, lookup, work); !errors.Is(err, idempotency.ErrNotBegun) {
		t.Errorf("BeginAndDo on a closed connection: %v, want ErrNotBegun", err)
	}
}
