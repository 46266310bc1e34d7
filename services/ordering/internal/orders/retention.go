package orders

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// ForgetIdempotencyKeys deletes the Idempotency-Keys of placing and cancelling orders
// older than retention (IDEMPOTENCY_KEY_RETENTION, 24 hours by default, as the IETF
// Idempotency-Key draft suggests), in batches, in one ordering process at a time
// (pgdb.DeleteInBatches), and returns how many it deleted. A client retries within
// minutes, never a day later, so a key outlives its use; the order stays, and a retry
// after the retention places a new order (docs/contracts.md). A key still being written
// is younger than the retention, so its transaction is never raced.
func ForgetIdempotencyKeys(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	// The keys of POST /orders/{id}/cancel go first and by the same rule: a batch takes
	// the cancellations' old keys first and fills up with those of POST /orders.
	return pgdb.DeleteInBatches(ctx, pool, forgetKeysLockKey, 1000, func(tx pgx.Tx, batch int) (int64, error) {
		q := store.New(tx)
		n, err := q.DeleteExpiredCancelIdempotencyKeys(ctx, store.DeleteExpiredCancelIdempotencyKeysParams{
			RetentionSeconds: retention.Seconds(),
			BatchSize:        int32(batch),
		})
		if err != nil || n == int64(batch) {
			return n, err
		}
		m, err := q.DeleteExpiredIdempotencyKeys(ctx, store.DeleteExpiredIdempotencyKeysParams{
			RetentionSeconds: retention.Seconds(),
			BatchSize:        int32(batch) - int32(n),
		})
		return n + m, err
	})
}

// forgetKeysLockKey is the advisory lock key of the sweep ("idemkey" in ASCII).
const forgetKeysLockKey = 0x6964656d6b6579

// RunForgetIdempotencyKeys calls ForgetIdempotencyKeys at once and then every interval
// until ctx ends. A failed sweep is logged and tried again at the next tick.
func RunForgetIdempotencyKeys(ctx context.Context, pool *pgxpool.Pool, retention, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := ForgetIdempotencyKeys(ctx, pool, retention); err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "forgetting old idempotency keys failed", "err", err)
		} else if n > 0 {
			log.InfoContext(ctx, "forgot old idempotency keys", "deleted", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
