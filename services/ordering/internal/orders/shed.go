package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/semaphore"
)

// Load shedding (docs/performance.md#load-shedding). An API request takes one of as many
// slots as the pool has connections, waiting at most PoolWait for one; without a slot, or
// without a connection at all, it is refused with an UnavailableError before any
// statement is sent, and the API answers 503 with Retry-After: nothing was done, so the
// client may send it again with the same Idempotency-Key. An accepted request's latency
// stays bounded however many are refused beside it. Only the API is bounded: the consumer
// and the relay do work already accepted, and wait as long as they need.

// DefaultPoolWait is how long an API request waits for a database connection by default
// (ORDERING_POOL_WAIT).
const DefaultPoolWait = 500 * time.Millisecond

// ConnectWait bounds how long a request that has its slot waits for the pool to hand it
// a connection: one being made, or one the relay or the consumer is about to give back.
const ConnectWait = 2 * time.Second

// RetryAfter is the Retry-After, in seconds, of a request refused for want of a connection.
const RetryAfter = 1

// Reasons of an UnavailableError.
const (
	// ReasonPoolExhausted: as many requests as the pool has connections stayed in
	// progress for PoolWait, or every connection stayed busy for ConnectWait.
	ReasonPoolExhausted = "pool-exhausted"
	// ReasonDatabaseUnreachable: no connection could be made, or the one handed out broke
	// before the transaction began.
	ReasonDatabaseUnreachable = "database-unreachable"
	// ReasonConnectionLost: the request's connection broke under a statement (the
	// server hung up or ended the session, the network failed). Unlike the two above,
	// the request had begun: if the break came during its COMMIT, it may have committed.
	ReasonConnectionLost = "database-connection-lost"
	// ReasonDatabaseRefused: the database refused work of this kind, whatever the
	// request (pgdb.Refused: a privilege revoked, a read-only standby after a failover).
	ReasonDatabaseRefused = "database-refused"
	// ReasonDatabaseTimeout: the server cancelled a statement of the request at its
	// statement timeout (pgdb.TimedOut: a lock held by another transaction, a database
	// too busy to answer in time). Its transaction was rolled back: nothing was done.
	ReasonDatabaseTimeout = "database-timeout"
)

// UnavailableError is a request refused before it did anything: no connection within the
// bound, or none at all. The API answers 503 with Retry-After.
type UnavailableError struct {
	Reason string        // ReasonPoolExhausted or ReasonDatabaseUnreachable
	Waited time.Duration // how long the request waited for a connection
	InUse  int32         // connections of the pool in use when it gave up
	Max    int32         // the pool's size
	Err    error
}

func (e *UnavailableError) Error() string {
	switch e.Reason {
	case ReasonPoolExhausted:
		return fmt.Sprintf("%s: no database connection within %v (%d of %d in use)", e.Reason, e.Waited.Round(time.Millisecond), e.InUse, e.Max)
	default:
		return fmt.Sprintf("%s: %v", e.Reason, e.Err)
	}
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// SetPoolWait sets how long an API request waits for its turn at the database before it
// is refused (0: as long as the request lasts, the behaviour without shedding).
func (s *Service) SetPoolWait(d time.Duration) {
	s.poolWait = d
	s.slots = semaphore.NewWeighted(int64(s.pool.Config().MaxConns))
}

// acquire takes a slot and a connection of the pool for an API request, waiting at most
// s.poolWait for the slot and ConnectWait for the connection. release gives both back.
// Slots count requests, not connections being made: a pool slow to grow or to reconnect
// after an outage is not overloaded, and ConnectWait bounds the wait for it instead.
func (s *Service) acquire(ctx context.Context) (conn *pgxpool.Conn, release func(), err error) {
	if s.poolWait <= 0 {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return conn, conn.Release, nil
	}
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, s.poolWait)
	err = s.slots.Acquire(sctx, 1)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err() // the client went away: nobody to answer
		}
		stat := s.pool.Stat()
		return nil, nil, &UnavailableError{Reason: ReasonPoolExhausted, Waited: time.Since(start), InUse: stat.AcquiredConns(), Max: stat.MaxConns(), Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, ConnectWait)
	defer cancel()
	conn, err = s.pool.Acquire(cctx)
	if err != nil {
		s.slots.Release(1)
		if ctx.Err() != nil {
			return nil, nil, err
		}
		stat := s.pool.Stat()
		reason := ReasonDatabaseUnreachable
		if errors.Is(err, context.DeadlineExceeded) && stat.AcquiredConns() >= stat.MaxConns() {
			reason = ReasonPoolExhausted
		}
		return nil, nil, &UnavailableError{Reason: reason, Waited: time.Since(start), InUse: stat.AcquiredConns(), Max: stat.MaxConns(), Err: err}
	}
	return conn, func() { conn.Release(); s.slots.Release(1) }, nil
}

// inTx runs fn in a transaction on a connection taken with acquire, and commits when fn
// returns nil. A failure to begin (the connection broke while idle) is an
// UnavailableError too: nothing was sent but BEGIN, so nothing happened.
func (s *Service) inTx(ctx context.Context, fn func(tx pgx.Tx) error) (err error) {
	conn, release, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return &UnavailableError{Reason: ReasonDatabaseUnreachable, Err: err}
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// read runs fn with a connection taken with acquire, for the API's reads.
func (s *Service) read(ctx context.Context, fn func(conn *pgxpool.Conn) error) error {
	conn, release, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	return fn(conn)
}
