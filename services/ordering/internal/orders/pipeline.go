package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// The fast form of PlaceOrder: the plain form's statements, in the plain form's order,
// in two round trips to Postgres instead of five (docs/performance.md):
//
//  1. BEGIN, the key's lock, the key's lookup (idempotency.BeginAndDo).
//  2. The order, its lines, its history, the key, the outbox row, COMMIT: one batch.
//
// It can be one batch because every value, the outbox row's included, is chosen in Go
// before anything is sent (newOrder, outbox.QueueWrite). A statement of batch 2 that
// fails aborts the transaction, and Postgres skips the rest of the batch, COMMIT too:
// nothing is committed, as in the plain form. Without a key, round trip 1 is BEGIN alone,
// so that a connection that broke while idle is still refused before anything is sent
// (503, as the plain form's failed BEGIN).

// SetPipelined chooses PlaceOrder's form: true (the default) the fast one of pipeline.go,
// false the plain one, answerOnce, which the benchmarks and tests measure it against.
func (s *Service) SetPipelined(on bool) { s.pipelined = on }

// placePipelined is PlaceOrder in two round trips, on a connection taken with acquire.
// It answers as answerOnce does, with the same errors.
func (s *Service) placePipelined(ctx context.Context, key string, req PlaceOrderRequest) (Answer, error) {
	ctx, span := s.tracer.Start(ctx, "PlaceOrder transaction", trace.WithAttributes(
		attribute.Bool("bookstore.idempotency_key", key != ""), attribute.Bool("bookstore.pipelined", true)))
	defer span.End()

	requestHash, err := idempotency.Hash(req)
	if err != nil {
		return Answer{}, err
	}
	pc, release, err := s.acquire(ctx)
	if err != nil {
		return Answer{}, err
	}
	defer release()
	conn := pc.Conn()
	ans, err := s.placeOn(ctx, conn, key, requestHash, req)
	if err != nil {
		// A refusal, a replay's failed COMMIT, a statement of batch 2 that failed: the
		// transaction may be open or aborted. The pool would close a connection given
		// back so; ROLLBACK gives it back ready.
		if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, "rollback")
		}
		return Answer{}, err
	}
	return ans, nil
}

// placeOn places the order on conn, outside a transaction when called: with a key
// through idempotency.BeginAndDo, which replays or refuses as Do does. It leaves a
// transaction open only when it returns an error.
func (s *Service) placeOn(ctx context.Context, conn *pgx.Conn, key string, requestHash []byte, req PlaceOrderRequest) (Answer, error) {
	var ans Answer
	work := func() ([]byte, error) {
		p, err := s.newOrder(key, requestHash, req)
		if err != nil {
			return nil, err
		}
		if _, err := outbox.QueueWrite(ctx, p.inserts, p.event); err != nil {
			return nil, err
		}
		// Everything is decided, nothing is committed (BEGIN, with a key the lock too, is
		// all that was sent): a crash here must leave no trace.
		if err := failpoint.Inject(ctx, contracts.OrderingBeforeCommit); err != nil {
			return nil, err
		}
		p.inserts.Queue("commit")
		if err := conn.SendBatch(ctx, p.inserts).Close(); err != nil {
			return nil, fmt.Errorf("insert order: %w", err)
		}
		ans = p.answer
		return ans.Body, nil
	}

	if key == "" {
		if _, err := conn.Exec(ctx, "begin"); err != nil {
			return Answer{}, notBegun(ctx, err)
		}
		_, err := work()
		return ans, err
	}
	k := idempotency.Key{Scope: placeScope, Key: key, RequestHash: requestHash}
	lookup := func(db *idempotency.LookupDB) (idempotency.Stored, error) { return lookupPlaced(ctx, db, key) }
	res, err := idempotency.BeginAndDo(ctx, conn, k, lookup, work)
	switch {
	case errors.Is(err, idempotency.ErrNotBegun):
		return Answer{}, notBegun(ctx, err)
	case err != nil:
		return Answer{}, err
	case !res.Replayed:
		return ans, nil
	}
	// A replay wrote nothing; its transaction ends as the plain form's does.
	if _, err := conn.Exec(ctx, "commit"); err != nil {
		return Answer{}, err
	}
	ans = Answer{Body: res.Response, Replayed: true}
	return ans, json.Unmarshal(res.Response, &ans.Order)
}

// notBegun is the error of a transaction whose BEGIN failed, as inTx makes it: nothing
// was done, so unless the client went away it is an UnavailableError.
func notBegun(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return &UnavailableError{Reason: ReasonDatabaseUnreachable, Err: err}
}
