// Package inbox makes a consumer idempotent where it matters: in the same transaction as
// the work.
//
// Every message may arrive twice, even at the same moment on two consumers, and "have I
// seen it?" followed by the work lets both copies pass. Instead Process inserts the
// (message id, consumer) row as the first statement of the work's transaction: the
// primary key decides. The second copy's insert waits for the first transaction and is
// skipped if it commits, or does the work if it rolled back. Either way, the work is done once.
package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// Retention is how long processed message ids are kept: 14 days, longer than any
// redelivery (minutes) and any manual DLQ replay window we support (a week). A message
// replayed after its id was deleted would be processed again.
const Retention = 14 * 24 * time.Hour

// Claim inserts the message's inbox row in tx. It returns true when this copy is the first
// and the caller must do the work in the same tx, false for a duplicate of a message this
// consumer already processed. The same id with different content is a producer bug that
// no retry can fix: Claim returns a poison error for it.
func Claim(ctx context.Context, tx pgx.Tx, consumer string, env event.Envelope) (bool, error) {
	q := store.New(tx)
	hash := env.ContentHash()
	n, err := q.ClaimInbox(ctx, store.ClaimInboxParams{
		MessageID:   env.UUID(),
		Consumer:    consumer,
		ContentHash: hash,
		EventType:   env.Type,
	})
	if err != nil {
		return false, fmt.Errorf("inbox claim %s: %w", env.ID, err)
	}
	if n == 1 {
		return true, nil
	}
	seen, err := q.InboxContentHash(ctx, store.InboxContentHashParams{MessageID: env.UUID(), Consumer: consumer})
	if err != nil {
		return false, fmt.Errorf("inbox lookup %s: %w", env.ID, err)
	}
	if !bytes.Equal(seen, hash) {
		return false, event.Poison(event.ReasonContentMismatch,
			fmt.Errorf("message %s was already processed by %s with different content", env.ID, consumer))
	}
	return false, nil
}

// Process runs work in one transaction behind the inbox claim. It returns processed=false,
// without running work, for a duplicate. If work fails or the process dies before commit,
// neither the inbox row nor the work's writes exist, and the redelivered message is
// processed from scratch.
func Process(ctx context.Context, pool *pgxpool.Pool, consumer string, env event.Envelope, work func(pgx.Tx) error) (processed bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		claimed, err := Claim(ctx, tx, consumer, env)
		if err != nil || !claimed {
			return err
		}
		processed = true
		return work(tx)
	})
	if err != nil {
		return false, err
	}
	return processed, nil
}

// ErrNotAllNew reports a batch that holds a copy of a message processed before: the
// batch is rolled back, and its messages are processed one at a time, which tells the
// copies from the rest (consumer.BatchHandler).
var ErrNotAllNew = errors.New("inbox: a message of the batch was processed before")

// ProcessAll is Process for several messages in one transaction: one claim for all of
// them, then work for all of them, then one commit. It is the fast path for what is
// almost always true, that every message is new; when one is not, it returns
// ErrNotAllNew and nothing is written. The primary key decides as it does for Process:
// of two batches that share a message, the second waits for the first to commit and
// then finds the conflict.
func ProcessAll(ctx context.Context, pool *pgxpool.Pool, consumer string, envs []event.Envelope, work func(pgx.Tx) error) error {
	claim := store.ClaimInboxBatchParams{Consumer: consumer}
	for _, env := range envs {
		claim.MessageIds = append(claim.MessageIds, env.UUID())
		claim.ContentHashes = append(claim.ContentHashes, env.ContentHash())
		claim.EventTypes = append(claim.EventTypes, env.Type)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		n, err := store.New(tx).ClaimInboxBatch(ctx, claim)
		if err != nil {
			return fmt.Errorf("inbox claim of %d messages: %w", len(envs), err)
		}
		if n != int64(len(envs)) {
			return ErrNotAllNew
		}
		return work(tx)
	})
}

// Cleanup deletes inbox rows older than retention, in batches, in one instance at a time
// (see pgdb.DeleteInBatches).
func Cleanup(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	return pgdb.DeleteInBatches(ctx, pool, cleanupLockKey, 1000, func(tx pgx.Tx, batch int) (int64, error) {
		return store.New(tx).DeleteProcessedInbox(ctx, store.DeleteProcessedInboxParams{
			RetentionSeconds: retention.Seconds(),
			BatchSize:        int32(batch),
		})
	})
}

// cleanupLockKey is the advisory lock key of inbox clean-up ("inbox" in ASCII).
const cleanupLockKey = 0x696e626f78

// RunCleanup calls Cleanup every interval until ctx ends.
func RunCleanup(ctx context.Context, pool *pgxpool.Pool, retention, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := Cleanup(ctx, pool, retention); err != nil && ctx.Err() == nil {
				log.WarnContext(ctx, "inbox cleanup failed", "err", err)
			} else if n > 0 {
				log.InfoContext(ctx, "inbox cleanup", "deleted", n)
			}
		}
	}
}
