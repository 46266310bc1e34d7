package outbox_test

import (
	"context"

	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// The relay's wake-up: writers notify only while a relay sleeps, and a relay falling
// asleep takes the rows of the writers that did not notify.

// wakeLock is the advisory lock a sleeping relay holds (00004_outbox_wake_only_idle_relays.sql).
const wakeLock = "hashtextextended('outbox wake', 0)"

// A writer sends NOTIFY outbox only while a relay holds the wake lock, that is, sleeps.
// The listener hears a second channel, probe, notified after the writer commits:
// notifications arrive in commit order, so whichever comes first says whether the writer
// notified, without waiting for a silence.
func TestAWriterNotifiesOnlyWhileARelaySleeps(t *testing.T) {
	pool, _, _ := setup(t)
	ctx := t.Context()
	listener := connect(t, pool)
	for _, channel := range []string{"outbox", "probe"} {
		if _, err := listener.Exec(ctx, "LISTEN "+channel); err != nil {
			t.Fatal(err)
		}
	}
	firstHeard := func(aggregate string) string {
		t.Helper()
		writeEvents(t, pool, testenv.ExampleType, aggregate, 1, 1)
		if _, err := pool.Exec(ctx, "NOTIFY probe"); err != nil {
			t.Fatal(err)
		}
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel == "outbox" { // the probe's, behind it
			if _, err := listener.WaitForNotification(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return n.Channel
	}

	if got := firstHeard("awake"); got != "probe" {
		t.Fatalf("with no relay asleep the writer notified %s: its commit serialised with every other writer's for no one", got)
	}
	sleeping := connect(t, pool)
	if _, err := sleeping.Exec(ctx, "SELECT pg_advisory_lock("+wakeLock+")"); err != nil {
		t.Fatal(err)
	}
	if got := firstHeard("asleep"); got != "outbox" {
		t.Fatalf("with a relay asleep the first notification was %s, want outbox: the sleeping relay was not woken", got)
	}
}

// A writer that commits while the relay is falling asleep did not notify (the relay did
// not hold the wake lock yet when the writer wrote), so the relay must take its row on
// its own: it waits for the writer's commit when it takes the lock, then claims once more.
// The relay polls once an hour here: only that last claim can publish the row in time.
func TestARowCommittedWhileTheRelayFallsAsleepIsPublishedWithoutAWakeUp(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := t.Context()
	// The writer writes first and holds its transaction open: it shares the wake lock,
	// so it will not notify.
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(context.Background()) }()
	if _, err := outbox.Write(ctx, writer, outbox.Event{Source: "bookstore/test", Type: testenv.ExampleType,
		AggregateType: "order", AggregateID: "late", Sequence: 1, Data: map[string]int{"n": 1}}); err != nil {
		t.Fatal(err)
	}

	conn := broker.NewConn(amqpURL, "relay")
	t.Cleanup(func() { _ = conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel,
		outbox.Config{ID: "relay", PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	// The relay found nothing committed and is falling asleep: it waits for the writer.
	testenv.Eventually(t, 30*time.Second, "the relay to wait for the wake lock", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "+
			"AND mode = 'ExclusiveLock' AND ((classid::bigint << 32) | objid::bigint) = "+wakeLock) == 1
	})
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the row to be published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE aggregate_id = 'late' AND state = 'published'") == 1
	})
}

// idleAfter counts the connections to db's database that are idle after the generated
// query called name (sql/platform/queries). The name is an argument, not part of the
// probe's text, so a connection idle after the probe is never counted.
func idleAfter(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string) int {
	t.Helper()
	var n int
	err := db.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "+
		"AND state = 'idle' AND query LIKE '-- name: ' || $1 || ' %'", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// connect opens a connection of its own to pool's database, closed when the test ends.
func connect(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// Two relays of one database sleep side by side: one holds the wake lock, the other
// sleeps without it instead of waiting for it, and a row written then is published by
// whichever wakes first. Both poll once an hour here.
func TestTwoRelaysSleepSideBySideAndEitherPublishesTheNextRow(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := t.Context()
	for _, id := range []string{"relay-a", "relay-b"} {
		conn := broker.NewConn(amqpURL, id)
		t.Cleanup(func() { _ = conn.Close() })
		relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel,
			outbox.Config{ID: id, PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	// Both relays are asleep: one took the sleeper lock and then the wake lock, the other
	// found the sleeper lock taken and sleeps without waiting for the wake lock. Each
	// relay's last statement on its wake connection says which. A connection idle after
	// the probe must not count: the pool hands the probe whichever connection is free and
	// leaves the others idle after what they ran last, a probe too.
	idleAfter(t, connect(t, pool), "TakeSleeperLock")
	testenv.Eventually(t, 30*time.Second, "one relay asleep holding the wake lock, the other asleep without it", func() bool {
		return idleAfter(t, pool, "HoldWakeLock") == 1 && idleAfter(t, pool, "TakeSleeperLock") == 1
	})
	writeEvents(t, pool, testenv.ExampleType, "next", 1, 1)
	testenv.Eventually(t, 30*time.Second, "the row to be published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})
}

// Relay M has an order's first event in flight (published, not yet marked) when the
// order's second event commits; no relay sleeps, so the writer does not notify. Relay S
// falls asleep holding the wake lock: its last claim finds the second event behind the
// first. Then M marks the first and falls asleep without the sleeper lock. No writer
// notifies any more and both relays poll once an hour: only a claim made after M's mark
// can publish the second event in time.
func TestAnEventUnblockedByOneRelayWhileAnotherSleepsIsPublishedWithoutAWakeUp(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := t.Context()
	// The test's hook between publish and mark: a mark waits for an advisory lock the
	// test holds, so M stops there until S is asleep.
	hook := connect(t, pool)
	for _, sql := range []string{
		`CREATE FUNCTION hold_mark() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_advisory_xact_lock_shared(hashtextextended('test mark', 0));
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER hold_mark BEFORE UPDATE OF state ON outbox FOR EACH ROW
		WHEN (NEW.state = 'published') EXECUTE FUNCTION hold_mark()`,
		`SELECT pg_advisory_lock(hashtextextended('test mark', 0))`,
	} {
		if _, err := hook.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	releaseMarks := func() {
		if _, err := hook.Exec(context.Background(), "SELECT pg_advisory_unlock_all()"); err != nil {
			t.Fatal(err)
		}
	}
	startRelay := func(id string) {
		conn := broker.NewConn(amqpURL, id)
		t.Cleanup(func() { _ = conn.Close() })
		relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel,
			outbox.Config{ID: id, PollInterval: time.Hour, CleanupInterval: time.Hour, Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		runRelay(t, relay)
	}
	write := func(sequence int64) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := outbox.Write(ctx, tx, outbox.Event{Source: "bookstore/test", Type: testenv.ExampleType,
				AggregateType: "order", AggregateID: "blocked", Sequence: sequence, Data: map[string]int64{"n": sequence}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	probe := connect(t, pool) // not the relays' pool: a probe there would change what they ran last
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := probe.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	write(1)
	startRelay("relay-m")
	t.Cleanup(releaseMarks) // before relay-m stops, should the test end early
	testenv.Eventually(t, 30*time.Second, "relay-m to publish the first event and wait to mark it", func() bool {
		return count("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "+
			"AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('test mark', 0)") == 1
	})
	write(2)
	startRelay("relay-s")
	// S's wake connection is idle after HoldWakeLock, and a claim that began after it
	// is over: its last claim before it sleeps.
	testenv.Eventually(t, 30*time.Second, "relay-s asleep holding the wake lock after its last claim", func() bool {
		return count("SELECT count(*) FROM pg_stat_activity w, pg_stat_activity c "+
			"WHERE w.datname = current_database() AND c.datname = current_database() "+
			"AND w.state = 'idle' AND w.query LIKE '-- name: HoldWakeLock %' "+
			"AND c.state = 'idle' AND c.query LIKE '-- name: ClaimOutbox %' AND c.query_start > w.state_change") == 1
	})
	if n := count("SELECT count(*) FROM outbox WHERE state = 'published'"); n != 0 {
		t.Fatalf("%d events published before relay-m's mark", n)
	}
	releaseMarks()
	testenv.Eventually(t, 30*time.Second, "the second event to be published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 2
	})
}
