package stock

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// LevelRetention is how long a replaced stock level is kept: the last hour of each book's
// stock changes, for an operator asking what moved it, and enough live levels per book
// that the planner reads the newest by its key (see 00005_stock_levels.sql).
const LevelRetention = time.Hour

// levelCleanupLockKey is the advisory lock key of the levels' clean-up ("levels" in ASCII).
const levelCleanupLockKey = 0x6c6576656c73

// CleanupLevels deletes the stock levels replaced more than retention ago, in batches, in
// one instance at a time (see pgdb.DeleteInBatches). A book's newest level is never
// deleted, however old.
func CleanupLevels(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	return pgdb.DeleteInBatches(ctx, pool, levelCleanupLockKey, 1000, func(tx pgx.Tx, batch int) (int64, error) {
		return store.New(tx).DeleteReplacedLevels(ctx, store.DeleteReplacedLevelsParams{
			RetentionSeconds: retention.Seconds(),
			BatchSize:        int32(batch),
		})
	})
}

// RunLevelCleanup calls CleanupLevels with LevelRetention every interval until ctx ends.
func RunLevelCleanup(ctx context.Context, pool *pgxpool.Pool, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := CleanupLevels(ctx, pool, LevelRetention); err != nil && ctx.Err() == nil {
				log.WarnContext(ctx, "stock level cleanup failed", "err", err)
			} else if n > 0 {
				log.InfoContext(ctx, "stock level cleanup", "deleted", n)
			}
		}
	}
}
