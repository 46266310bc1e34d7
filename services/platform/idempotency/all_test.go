package idempotency_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/testenv"
)

// batched is one request of a batch: its key and its body.
type batched struct {
	key  string
	body any
}

// requestAll runs a batch of requests through DoAll in one transaction of its own.
// inWork, if not nil, is called while the work holds the keys, before it commits.
func requestAll(ctx context.Context, pool *pgxpool.Pool, reqs []batched, inWork func()) ([]idempotency.Outcome, error) {
	keys := make([]idempotency.Key, len(reqs))
	names := make([]string, len(reqs))
	for i, r := range reqs {
		hash, err := idempotency.Hash(r.body)
		if err != nil {
			return nil, err
		}
		keys[i] = idempotency.Key{Scope: "test", Key: r.key, RequestHash: hash}
		names[i] = r.key
	}
	var out []idempotency.Outcome
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		lookupAll := func(db *idempotency.LookupAllDB) ([]idempotency.Stored, error) {
			rows, err := db.Query(ctx, "SELECT key, hash, response FROM keys WHERE key = ANY($1)", names)
			if err != nil {
				return nil, err
			}
			found := map[string]idempotency.Stored{}
			var key string
			var s idempotency.Stored
			if _, err := pgx.ForEachRow(rows, []any{&key, &s.RequestHash, &s.Response}, func() error {
				found[key] = s
				return nil
			}); err != nil {
				return nil, err
			}
			stored := make([]idempotency.Stored, len(names))
			for i, name := range names {
				stored[i] = found[name]
			}
			return stored, nil
		}
		workAll := func(fresh []int) ([][]byte, error) {
			resps := make([][]byte, len(fresh))
			for j, i := range fresh {
				if _, err := tx.Exec(ctx, "INSERT INTO work VALUES (1)"); err != nil {
					return nil, err
				}
				resps[j] = []byte(`{"done":"` + names[i] + `"}`)
				if _, err := tx.Exec(ctx, "INSERT INTO keys VALUES ($1, $2, $3)", names[i], keys[i].RequestHash, resps[j]); err != nil {
					return nil, err
				}
			}
			if inWork != nil {
				inWork()
			}
			return resps, nil
		}
		var err error
		out, err = idempotency.DoAll(ctx, tx, keys, lookupAll, workAll)
		return err
	})
	return out, err
}

// A batch decides each of its keys as Do would have alone: a new key is worked, a
// finished one replayed, one finished with another body refused, and one another
// transaction is working on right now told it is in flight.
func TestABatchDecidesEachKeyAsDoWould(t *testing.T) {
	pool := keys(t)
	ctx := context.Background()
	body, other := map[string]int{"n": 1}, map[string]int{"n": 2}
	for _, key := range []string{"finished", "finished-other-body"} {
		if _, err := request(ctx, pool, key, body, nil); err != nil {
			t.Fatal(err)
		}
	}
	inWork, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := request(ctx, pool, "held", body, func() { close(inWork); <-release })
		held <- err
	}()
	select {
	case <-inWork:
	case err := <-held:
		t.Fatalf("the holder ended before its work: %v", err)
	}

	// A batch that took the held key for new would wait for the holder's row: the timeout
	// makes that a failure, not a hang.
	within, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := requestAll(within, pool, []batched{{"new", body}, {"finished", body}, {"finished-other-body", other}, {"held", body}}, nil)
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if o := out[0]; o.Err != nil || o.Replayed || string(o.Response) != `{"done":"new"}` {
		t.Errorf("new key: %+v, want its work's response", o)
	}
	if o := out[1]; o.Err != nil || !o.Replayed || string(o.Response) != `{"done":true}` {
		t.Errorf("finished key: %+v, want a replay of the first response", o)
	}
	if o := out[2]; !errors.Is(o.Err, idempotency.ErrMismatch) {
		t.Errorf("finished key, another body: %+v, want ErrMismatch", o)
	}
	if o := out[3]; !errors.Is(o.Err, idempotency.ErrInFlight) {
		t.Errorf("key held by another transaction: %+v, want ErrInFlight", o)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM work"); n != 4 {
		t.Errorf("work done %d times, want 4: two before, the held one and the batch's new one", n)
	}
}

// A batch holds its keys with Do's locks: while it works, Do on one of them is told it is
// in flight, and once it committed, replayed.
func TestWhileABatchWorksDoOnOneOfItsKeysIsInFlight(t *testing.T) {
	pool := keys(t)
	ctx := context.Background()
	body := map[string]int{"n": 1}
	inWork, release := make(chan struct{}), make(chan struct{})
	batch := make(chan error, 1)
	go func() {
		_, err := requestAll(ctx, pool, []batched{{"a", body}, {"b", body}}, func() { close(inWork); <-release })
		batch <- err
	}()
	select {
	case <-inWork:
	case err := <-batch:
		t.Fatalf("the batch ended before its work: %v", err)
	}
	within, cancel := context.WithTimeout(ctx, 10*time.Second) // not a hang if Do took the key
	defer cancel()
	if _, err := request(within, pool, "b", body, nil); !errors.Is(err, idempotency.ErrInFlight) {
		t.Errorf("Do while a batch works on its key: %v, want ErrInFlight", err)
	}
	close(release)
	if err := <-batch; err != nil {
		t.Fatal(err)
	}
	if res, err := request(ctx, pool, "b", body, nil); err != nil || !res.Replayed {
		t.Errorf("Do after the batch committed: %+v %v, want a replay", res, err)
	}
}

// A key twice in one batch is worked once: the second copy of a new key is in flight, as
// a concurrent copy would be; copies of a finished key are each replayed or refused by
// their own body.
func TestAKeyTwiceInABatchIsWorkedOnce(t *testing.T) {
	pool := keys(t)
	ctx := context.Background()
	body, other := map[string]int{"n": 1}, map[string]int{"n": 2}
	if _, err := request(ctx, pool, "finished", body, nil); err != nil {
		t.Fatal(err)
	}
	out, err := requestAll(ctx, pool, []batched{{"k", body}, {"finished", other}, {"k", body}, {"finished", body}, {"k", other}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := out[0]; o.Err != nil || o.Replayed {
		t.Errorf("first copy of a new key: %+v, want it worked", o)
	}
	for _, i := range []int{2, 4} {
		if o := out[i]; !errors.Is(o.Err, idempotency.ErrInFlight) {
			t.Errorf("copy %d of the new key: %+v, want ErrInFlight", i, o)
		}
	}
	if o := out[1]; !errors.Is(o.Err, idempotency.ErrMismatch) {
		t.Errorf("finished key, another body: %+v, want ErrMismatch", o)
	}
	if o := out[3]; o.Err != nil || !o.Replayed {
		t.Errorf("finished key, its body: %+v, want a replay", o)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM work"); n != 2 {
		t.Errorf("work done %d times, want 2: the finished key's and k's once", n)
	}
}

// A batch's locks and lookups go to Postgres in one round trip, however many keys; the
// rest are the work's statements and the transaction's own.
func TestABatchLocksAndLooksUpAllItsKeysInOneRoundTrip(t *testing.T) {
	_, dbURL := keysAt(t)
	ctx := context.Background()
	pool, sent := testenv.TracedPool(t, dbURL)
	body := map[string]int{"n": 1}
	if _, err := requestAll(ctx, pool, []batched{{"warm-up", body}}, nil); err != nil {
		t.Fatal(err)
	}
	sent.Reset()
	if _, err := requestAll(ctx, pool, []batched{{"warm-up", body}, {"a", body}, {"b", body}, {"c", body}}, nil); err != nil {
		t.Fatal(err)
	}
	const lockAndLookup = "SELECT name, pg_try_advisory_xact_lock + SELECT key, hash, response FROM keys WHERE key = ANY"
	want := []string{"begin", lockAndLookup}
	for range 3 {
		want = append(want, "INSERT INTO work VALUES", "INSERT INTO keys VALUES")
	}
	want = append(want, "commit")
	if got := sent.Reset(); !slices.Equal(got, want) {
		t.Errorf("round trips\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// A batch lookup that sends no query, or anything but its one Query, is refused: it would
// otherwise decide without the locks, or read past the batch.
func TestABatchLookupIsExactlyOneQuery(t *testing.T) {
	pool := keys(t)
	ctx := context.Background()
	const query = "SELECT hash, response FROM keys WHERE key = ANY($1)"
	keys := []idempotency.Key{{Scope: "test", Key: "k"}}
	for name, lookup := range map[string]func(db *idempotency.LookupAllDB) ([]idempotency.Stored, error){
		"no query": func(*idempotency.LookupAllDB) ([]idempotency.Stored, error) {
			return []idempotency.Stored{{}}, nil
		},
		"a QueryRow": func(db *idempotency.LookupAllDB) ([]idempotency.Stored, error) {
			var s idempotency.Stored
			err := db.QueryRow(ctx, query, []string{"k"}).Scan(&s.RequestHash, &s.Response)
			return []idempotency.Stored{s}, err
		},
		"two Queries": func(db *idempotency.LookupAllDB) ([]idempotency.Stored, error) {
			for range 2 {
				rows, err := db.Query(ctx, query, []string{"k"})
				if err != nil {
					return nil, err
				}
				rows.Close()
			}
			return []idempotency.Stored{{}}, nil
		},
	} {
		worked := false
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := idempotency.DoAll(ctx, tx, keys, lookup, func([]int) ([][]byte, error) {
				worked = true
				return [][]byte{nil}, nil
			})
			return err
		})
		if err == nil || worked {
			t.Errorf("%s: %v (worked: %v), want an error and no work", name, err, worked)
		}
	}
}
