package harness

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/testenv"
)

// TestHoldsRelayLockSeesTheLockOnlyWhileItsSessionHoldsIt takes a relay id's lock as a
// relay does (TryRelayLock in sql/platform/queries/outbox.sql) and expects
// HoldsRelayLock to see it for that id alone, and no longer once the session has ended:
// what a relay twin waits for before it starts.
func TestHoldsRelayLockSeesTheLockOnlyWhileItsSessionHoldsIt(t *testing.T) {
	testenv.Database(t, "relaylock") // skips (fails in CI) when Postgres is down
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id := testenv.Name("relay")
	holds := func(id string) bool {
		t.Helper()
		held, err := HoldsRelayLock(ctx, pool, id)
		if err != nil {
			t.Fatal(err)
		}
		return held
	}
	if holds(id) {
		t.Fatalf("the lock of %s is held before anyone took it", id)
	}
	relay, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	var locked bool
	if err := relay.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended('outbox relay ' || $1::text, 0))", id).Scan(&locked); err != nil || !locked {
		t.Fatalf("taking the lock: %v %v", locked, err)
	}
	if !holds(id) {
		t.Errorf("the lock of %s is held by a live session and HoldsRelayLock does not see it", id)
	}
	if holds(id + "-other") {
		t.Errorf("another id's lock counts as %s's", id)
	}
	relay.Close(ctx)
	for holds(id) {
		if ctx.Err() != nil {
			t.Fatalf("the lock of %s is still seen after its session ended", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
