// Package idempotency is the server side of an Idempotency-Key header: a client that
// cannot know whether its request got through sends it again with the same key, and the
// server does the work once and answers the retry as it answered the first time.
//
// Do runs inside the work's transaction and stores the response there, so work and key
// commit together or not at all (BeginAndDo also begins that transaction, in the same
// round trip). Its steps, in this order:
//
//  1. Try the key's transaction-scoped advisory lock, without waiting.
//  2. Look the key up. Found: a replay (or, with another body, a mismatch), lock or not,
//     so no finished request is ever told "in flight".
//  3. Not found, not locked: another copy is at work now: ErrInFlight (409).
//  4. Not found, locked: the first copy. Do the work and store the response.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrInFlight: another request with this key is being processed right now.
	ErrInFlight = errors.New("a request with this Idempotency-Key is still in flight")
	// ErrMismatch: the key was used before with a different request.
	ErrMismatch = errors.New("this Idempotency-Key was used with a different request body")
)

// Stored is what a service kept for a key: the fingerprint of the request and the
// response it gave.
type Stored struct {
	RequestHash []byte
	Response    []byte
}

// Result is the response to send: the first response's bytes for a replay.
type Result struct {
	Response []byte
	Replayed bool
}

// Key is one request's key within a scope (the service and use case, e.g.
// "ordering/orders", no colon): keys of different scopes do not share a lock.
type Key struct {
	Scope       string
	Key         string
	RequestHash []byte // Hash of the decoded request
}

// Do answers the request of k in tx. lookup reads what was stored for k.Key with one
// query on db, and returns an error wrapping pgx.ErrNoRows when nothing was; work does
// the work, stores its response under the key in tx, and returns that response.
//
// The lock and the lookup share a round trip but stay two statements, in this order: in
// READ COMMITTED each reads from a snapshot taken when it starts, and a holder releases
// the lock only once its commit is visible, so a lookup after the lock sees a first copy
// that committed. One statement would read from a snapshot before the lock and could do
// the work twice.
func Do(ctx context.Context, tx pgx.Tx, k Key, lookup func(db *LookupDB) (Stored, error), work func() ([]byte, error)) (Result, error) {
	return do(&LookupDB{db: tx, lock: k.Scope + ":" + k.Key}, k, lookup, work)
}

// Batcher is what BeginAndDo sends its round trip on: a *pgx.Conn, or a *pgxpool.Conn.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ErrNotBegun wraps the error of a BeginAndDo whose BEGIN failed (the connection broke
// while idle, say): nothing was done.
var ErrNotBegun = errors.New("idempotency: the transaction did not begin")

// BeginAndDo is Do on a connection outside a transaction: it begins one, and sends BEGIN
// in the round trip of the lock and the lookup, before them, so a use case that sends
// its work as one more batch ending in COMMIT is two round trips in all. work runs in
// the transaction so begun, on conn, and may commit it.
//
// Whatever it returns, the transaction may still be open on conn, or aborted: after a
// replay, a refusal, or a failed or uncommitted work the caller ends it (COMMIT or
// ROLLBACK), so that the connection goes back to its pool outside a transaction.
func BeginAndDo(ctx context.Context, conn Batcher, k Key, lookup func(db *LookupDB) (Stored, error), work func() ([]byte, error)) (Result, error) {
	return do(&LookupDB{db: conn, begin: true, lock: k.Scope + ":" + k.Key}, k, lookup, work)
}

// do is Do and BeginAndDo, with db ready to send the lookup's round trip.
func do(db *LookupDB, k Key, lookup func(db *LookupDB) (Stored, error), work func() ([]byte, error)) (Result, error) {
	prev, err := lookup(db)
	err = db.done(err)
	switch {
	case db.notBegun != nil:
		return Result{}, fmt.Errorf("%w: %w", ErrNotBegun, db.notBegun)
	case errors.Is(err, pgx.ErrNoRows) && !db.locked:
		return Result{}, ErrInFlight
	case errors.Is(err, pgx.ErrNoRows):
		// The first copy: work below.
	case err != nil:
		return Result{}, fmt.Errorf("lock and look up idempotency key: %w", err)
	case !bytes.Equal(prev.RequestHash, k.RequestHash):
		return Result{}, ErrMismatch
	default:
		return Result{Response: prev.Response, Replayed: true}, nil
	}
	resp, err := work()
	if err != nil {
		return Result{}, err
	}
	return Result{Response: resp}, nil
}

// LookupDB is what a lookup reads the key's row from. It has the methods of the DBTX
// interface that sqlc generates, so a lookup is a call of the service's own query:
//
//	func(db *idempotency.LookupDB) (idempotency.Stored, error) {
//		row, err := store.New(db).GetEmailByKey(ctx, key)
//		return idempotency.Stored{RequestHash: row.RequestHash, Response: row.ResponseBody}, err
//	}
//
// Its QueryRow sends that query in one batch with the lock's statement (see Do). A lookup
// is that one QueryRow: Exec and Query fail, and so does a second QueryRow.
type LookupDB struct {
	db       Batcher          // the transaction, or with begin a connection outside one
	begin    bool             // whether the batch begins the transaction: BEGIN first
	notBegun error            // with begin, BEGIN's error
	lock     string           // the advisory lock's name, "scope:key"
	results  pgx.BatchResults // nil until QueryRow has sent the batch
	locked   bool             // whether the lock statement took the lock
}

var errOneQuery = errors.New("idempotency: a lookup is exactly one QueryRow")

// QueryRow sends the lock's statement and then the lookup's query in one batch (after
// BEGIN for BeginAndDo), reads whether the lock was taken, and returns the lookup's row.
func (db *LookupDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if db.results != nil {
		return errRow{errOneQuery}
	}
	b := &pgx.Batch{}
	if db.begin {
		b.Queue("begin")
	}
	b.Queue("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", db.lock)
	b.Queue(sql, args...)
	db.results = db.db.SendBatch(ctx, b)
	if db.begin {
		if _, err := db.results.Exec(); err != nil {
			db.notBegun = err
			return errRow{err}
		}
	}
	if err := db.results.QueryRow().Scan(&db.locked); err != nil {
		return errRow{err}
	}
	return db.results.QueryRow()
}

// Exec fails: a lookup is one QueryRow.
func (db *LookupDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errOneQuery
}

// Query fails: a lookup is one QueryRow.
func (db *LookupDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errOneQuery
}

// done finishes the batch, so tx is free for the work, and returns the lookup's error,
// or the batch's. A lookup that sent no query took no lock and read nothing: its own
// error, pgx.ErrNoRows say, must not pass for an answer.
func (db *LookupDB) done(lookupErr error) error {
	if db.results == nil {
		return errOneQuery
	}
	closeErr := db.results.Close()
	if lookupErr != nil {
		return lookupErr
	}
	return closeErr
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Hash fingerprints a decoded request, so the same request sent with other whitespace or
// field order is still "the same body" for its key.
func Hash(req any) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}
