package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Outcome is what DoAll decided for one key of a batch: its Result, or the error Do
// would have returned for that key alone, ErrInFlight or ErrMismatch.
type Outcome struct {
	Result
	Err error
}

// DoAll is Do for a batch of requests in one transaction: the keys' locks and lookups in
// one round trip, then one call of workAll for every key that is new. It decides each key
// exactly as Do would, and returns an Outcome per key, in the order of keys.
//
// lookupAll reads what was stored for the keys with one query on db and returns it in the
// order of keys, a zero Stored (nil RequestHash) for a key with nothing stored. workAll
// gets the indexes into keys of the new ones, does their work, stores each response under
// its key in tx, and returns the responses in the order of fresh. An error of either, or
// of the round trip, is DoAll's error, with no outcomes: the caller rolls tx back.
//
// A key twice in the batch is worked once: its first copy is decided as Do would, every
// later copy as a concurrent copy would be while the first holds the lock (ErrInFlight
// for a new key; a replay or mismatch, by its own body, for a stored one). The locks are
// taken the same way as Do's, with pg_try_advisory_xact_lock, which never waits: a batch
// cannot deadlock against another whatever the order of its keys, and the statement
// taking them still comes before the lookup, for the snapshot Do explains.
func DoAll(ctx context.Context, tx pgx.Tx, keys []Key, lookupAll func(db *LookupAllDB) ([]Stored, error), workAll func(fresh []int) ([][]byte, error)) ([]Outcome, error) {
	db := &LookupAllDB{tx: tx, locks: lockNames(keys)}
	stored, err := lookupAll(db)
	err = db.done(err)
	if err == nil && len(stored) != len(keys) {
		err = fmt.Errorf("lookup returned %d keys for %d", len(stored), len(keys))
	}
	if err != nil {
		return nil, fmt.Errorf("lock and look up idempotency keys: %w", err)
	}

	out := make([]Outcome, len(keys))
	var fresh []int
	first := map[string]bool{} // lock names already decided in this batch
	for i, k := range keys {
		prev, name := stored[i], k.Scope+":"+k.Key
		switch {
		case prev.RequestHash == nil && (!db.locked[name] || first[name]):
			out[i].Err = ErrInFlight
		case prev.RequestHash == nil:
			fresh = append(fresh, i) // the first copy: work below
		case !bytes.Equal(prev.RequestHash, k.RequestHash):
			out[i].Err = ErrMismatch
		default:
			out[i].Result = Result{Response: prev.Response, Replayed: true}
		}
		first[name] = true
	}
	if len(fresh) == 0 {
		return out, nil
	}
	resps, err := workAll(fresh)
	if err == nil && len(resps) != len(fresh) {
		err = fmt.Errorf("work returned %d responses for %d requests", len(resps), len(fresh))
	}
	if err != nil {
		return nil, err
	}
	for j, i := range fresh {
		out[i].Result = Result{Response: resps[j]}
	}
	return out, nil
}

// lockNames are the advisory locks' names of keys, "scope:key", each once, sorted.
func lockNames(keys []Key) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Scope + ":" + k.Key
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// LookupAllDB is what lookupAll reads the keys' rows from: LookupDB for a batch. Its
// Query sends the statement that tries every key's lock and then the lookup's query in
// one batch, and returns the lookup's rows: a lookup is that one Query, so that sqlc's
// :many form of the service's query can be it. Exec and QueryRow fail, and so does a
// second Query.
type LookupAllDB struct {
	tx      pgx.Tx
	locks   []string         // the advisory locks' names, each once
	results pgx.BatchResults // nil until Query has sent the batch
	locked  map[string]bool  // by name, whether the lock statement took the lock
}

var errOneQueryAll = errors.New("idempotency: a batch lookup is exactly one Query")

// Query sends the locks' statement and then the lookup's query in one batch, reads which
// locks were taken, and returns the lookup's rows.
func (db *LookupAllDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if db.results != nil {
		return nil, errOneQueryAll
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT name, pg_try_advisory_xact_lock(hashtextextended(name, 0))
		FROM unnest($1::text[]) WITH ORDINALITY AS l(name, i) ORDER BY i`, db.locks)
	b.Queue(sql, args...)
	db.results = db.tx.SendBatch(ctx, b)
	rows, err := db.results.Query()
	if err != nil {
		return nil, err
	}
	db.locked = make(map[string]bool, len(db.locks))
	var name string
	var locked bool
	if _, err := pgx.ForEachRow(rows, []any{&name, &locked}, func() error {
		db.locked[name] = locked
		return nil
	}); err != nil {
		return nil, err
	}
	return db.results.Query()
}

// Exec fails: a batch lookup is one Query.
func (db *LookupAllDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errOneQueryAll
}

// QueryRow fails: a batch lookup is one Query.
func (db *LookupAllDB) QueryRow(context.Context, string, ...any) pgx.Row {
	return errRow{errOneQueryAll}
}

// done finishes the batch, so tx is free for the work, and returns the lookup's error, or
// the batch's; errOneQueryAll for a lookup that sent no query, and so took no lock.
func (db *LookupAllDB) done(lookupErr error) error {
	if db.results == nil {
		return errOneQueryAll
	}
	closeErr := db.results.Close()
	if lookupErr != nil {
		return lookupErr
	}
	return closeErr
}
