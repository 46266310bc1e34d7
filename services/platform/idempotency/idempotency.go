// Package idempotency is the server side of an Idempotency-Key header: a client that
// cannot know whether its request got through (a timeout, a crash, a lost response) sends
// it again with the same key, and the server does the work once and answers the retry as
// it answered the first time.
//
// Do runs inside the transaction that does the work and stores the response, so the work
// and the key commit together or not at all: a crash before the commit leaves no key, and
// the client's retry does the work afresh. The order of its steps is the point:
//
//  1. Look the key up. A request whose first copy has committed is a replay (or, with
//     another body, a mismatch), answered without a lock: any number of replays may run
//     at once, and none is told "in flight" for a request that finished long ago.
//  2. Only for a key not found: take a transaction-scoped advisory lock on it, without
//     waiting. A concurrent first copy holds it: this one gets ErrInFlight (409) rather
//     than doing the work a second time.
//  3. Look again, under the lock: the holder may have committed between 1 and 2.
//  4. Do the work, which stores the response under the key in the same transaction.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
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

// Do answers the request of k in tx. lookup returns what was stored for k.Key, or an error
// wrapping pgx.ErrNoRows; work does the work, stores its response under the key in tx, and
// returns that response.
func Do(ctx context.Context, tx pgx.Tx, k Key, lookup func() (Stored, error), work func() ([]byte, error)) (Result, error) {
	if r, found, err := replay(k, lookup); found || err != nil {
		return r, err
	}
	var locked bool
	err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", k.Scope+":"+k.Key).Scan(&locked)
	if err != nil {
		return Result{}, fmt.Errorf("lock idempotency key: %w", err)
	}
	if !locked {
		return Result{}, ErrInFlight
	}
	if r, found, err := replay(k, lookup); found || err != nil {
		return r, err
	}
	resp, err := work()
	if err != nil {
		return Result{}, err
	}
	return Result{Response: resp}, nil
}

func replay(k Key, lookup func() (Stored, error)) (Result, bool, error) {
	prev, err := lookup()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, fmt.Errorf("look up idempotency key: %w", err)
	case !bytes.Equal(prev.RequestHash, k.RequestHash):
		return Result{}, true, ErrMismatch
	}
	return Result{Response: prev.Response, Replayed: true}, true, nil
}

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
