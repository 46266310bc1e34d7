package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitForLockWait polls pg_stat_activity until a session of pool's database waits on a
// lock in a statement that holds statement, and returns its process id, or 0 once
// timeout passes. It is how a demo holds the real code in a failure window: it takes a
// lock the code's next statement needs, waits here until the code is blocked on it, and
// then ends that session (pg_terminate_backend) as a crash would, or lets it go.
func WaitForLockWait(ctx context.Context, pool *pgxpool.Pool, statement string, timeout time.Duration) (int32, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var pid int32
		err := pool.QueryRow(ctx, `
			SELECT coalesce(min(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			  AND wait_event_type = 'Lock' AND query ILIKE '%' || $1 || '%'`, statement).Scan(&pid)
		if err != nil {
			return 0, fmt.Errorf("observe lock waits: %w", err)
		}
		if pid != 0 {
			return pid, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, nil
}

// WaitFor polls query, which selects one boolean, until it is true, or fails after
// timeout; what names the awaited state in the error.
func WaitFor(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration, what, query string, args ...any) error {
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		if err := pool.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
