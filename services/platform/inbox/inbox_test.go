package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

func database(t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin, dbURL := testenv.Database(t, "inbox")
	pool, err := pgdb.Open(context.Background(), admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// processAged processes n new messages for consumer and backdates their inbox rows by age.
func processAged(t *testing.T, pool *pgxpool.Pool, consumer string, n int, age time.Duration) []event.Envelope {
	t.Helper()
	ctx := context.Background()
	envs := make([]event.Envelope, n)
	for i := range envs {
		env, err := event.New("bookstore/test", "test.thing-happened.v1", fmt.Sprintf("thing-%d", i), 1, map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		processed, err := inbox.Process(ctx, pool, consumer, env, func(pgx.Tx) error { return nil })
		if err != nil || !processed {
			t.Fatalf("first delivery of %s: processed %t, %v", env.ID, processed, err)
		}
		envs[i] = env
		if _, err := pool.Exec(ctx, "UPDATE inbox SET processed_at = now() - make_interval(secs => $1) WHERE message_id = $2",
			age.Seconds(), env.UUID()); err != nil {
			t.Fatal(err)
		}
	}
	return envs
}

// Cleanup deletes the ids processed longer ago than the retention and keeps the rest: a
// redelivery of a kept id is still a duplicate, and only an id past the retention, whose
// redelivery the retention assumes never comes, is processed again.
func TestInboxCleanupDeletesOnlyRowsOlderThanRetention(t *testing.T) {
	t.Parallel()
	pool := database(t)
	ctx := context.Background()
	expired := processAged(t, pool, "inventory", 4, inbox.Retention+time.Hour)
	kept := processAged(t, pool, "inventory", 2, inbox.Retention-time.Hour)
	processAged(t, pool, "notification", 1, 0)

	n, err := inbox.Cleanup(ctx, pool, inbox.Retention)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(expired)) {
		t.Errorf("Cleanup deleted %d rows, want the %d older than %v", n, len(expired), inbox.Retention)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM inbox").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != len(kept)+1 {
		t.Errorf("%d rows left, want %d: the ones inside the retention", left, len(kept)+1)
	}

	for _, env := range kept {
		processed, err := inbox.Process(ctx, pool, "inventory", env, func(pgx.Tx) error { return nil })
		if err != nil || processed {
			t.Errorf("redelivery of %s, kept for %v: processed %t, %v; want a duplicate", env.ID, inbox.Retention-time.Hour, processed, err)
		}
	}
	processed, err := inbox.Process(ctx, pool, "inventory", expired[0], func(pgx.Tx) error { return nil })
	if err != nil || !processed {
		t.Errorf("redelivery of %s past the retention: processed %t, %v; want processed again (its id is gone)", expired[0].ID, processed, err)
	}
}
