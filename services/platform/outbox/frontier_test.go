package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// holdSnapshot opens a REPEATABLE READ transaction on a connection of its own and reads
// the outbox, as a long report or a forgotten session would: until the test ends, no
// row version it might see, and no index entry pointing at one, can be cleaned up.
func holdSnapshot(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1 FROM outbox LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// passThrough leaves the index entries of n rows that went through a relay under a held
// snapshot, as fast as SQL can: each row is written pending, claimed and marked
// published, in one statement for each step, with UUIDv7 ids made at startMs, startMs+1,
// ... (Unix milliseconds). Each step is a transaction of its own, repeated in chunks so
// that the oldest snapshot falls transactions behind as a busy database's does.
func passThrough(t *testing.T, pool *pgxpool.Pool, n int, startMs int64) {
	t.Helper()
	ctx := context.Background()
	const chunk = 20_000
	for from := 0; from < n; from += chunk {
		ids := `(lpad(to_hex($1::bigint + g), 12, '0') || '7' || substr(md5(g::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid`
		// The updates find the chunk's rows by its id range, not by state: under the held
		// snapshot, the pending index keeps an entry for every row of the earlier chunks,
		// and a search by state walked them all (past the role's 5 s statement timeout on a
		// busy machine).
		chunkIDs := `id >= (lpad(to_hex($1::bigint), 12, '0') || repeat('0', 20))::uuid
			AND id < (lpad(to_hex($1::bigint + $2::int), 12, '0') || repeat('0', 20))::uuid`
		steps := []string{
			`INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope)
			 SELECT ` + ids + `, 'order', 'history-' || ($1::bigint + g), 1, 'example.thing', 1, '{}'
			 FROM generate_series(0, $2::int - 1) g`,
			`UPDATE outbox SET claimed_by = 'history', claimed_until = now() + interval '30 seconds' WHERE ` + chunkIDs,
			`UPDATE outbox SET state = 'published', published_at = now(), claimed_by = NULL, claimed_until = NULL WHERE ` + chunkIDs,
		}
		rows := min(chunk, n-from)
		for _, step := range steps {
			tag, err := pool.Exec(ctx, step, startMs+int64(from), rows)
			if err != nil {
				t.Fatal(err)
			}
			if tag.RowsAffected() != int64(rows) {
				t.Fatalf("%d rows of a chunk of %d: %s", tag.RowsAffected(), rows, step)
			}
		}
	}
	for range 1_000 { // transactions of their own, as a busy database's
		if _, err := pool.Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
	}
}

// newRelay is a relay over pool publishing to amqpURL with the relay's defaults.
func newRelay(t *testing.T, pool *pgxpool.Pool, amqpURL string, tel *telemetry.Telemetry, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	conn := broker.NewConn(amqpURL, cfg.ID)
	t.Cleanup(func() { conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, time.Second), tel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// medianClaim times the relay's claim (RunOnce with nothing to publish) k times.
func medianClaim(t *testing.T, relay *outbox.Relay, k int) time.Duration {
	t.Helper()
	var times []time.Duration
	for range k {
		start := time.Now()
		if n, err := relay.RunOnce(context.Background()); err != nil || n != 0 {
			t.Fatalf("an idle relay's RunOnce: %d rows, %v", n, err)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	return times[k/2]
}

// A snapshot held while 400,000 rows pass through the outbox leaves every index entry
// they had behind; the relay's claim starts at its frontier, the oldest pending row, so
// it steps over none of them and takes as long as before they passed. A claim from the
// start of the table walked them all: 38 ms after 70,000 rows here, past the role's 5 s
// statement timeout after minutes of a soak.
func TestAClaimUnderAHeldSnapshotTakesNoLongerAfterRowsPassed(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	relay := newRelay(t, pool, amqpURL, tel, outbox.Config{ID: "snapshot"})
	holdSnapshot(t, pool)
	// The rows pass before the claims are timed, as a relay's earlier batches did: an
	// hour ago, well before its frontier.
	medianClaim(t, relay, 1)
	before := medianClaim(t, relay, 21)
	batchBefore := timeBatch(t, pool, relay, "before")
	passThrough(t, pool, 400_000, time.Now().Add(-time.Hour).UnixMilli())
	after := medianClaim(t, relay, 21)
	t.Logf("median claim %v before, %v after 400,000 rows passed under the snapshot", before, after)
	if after > 3*before+2*time.Millisecond {
		t.Errorf("median claim %v after 400,000 rows passed under a held snapshot, %v before: the claim steps over the rows published since the snapshot began", after, before)
	}

	// And a batch: each row claimed is checked for an unpublished predecessor of its
	// aggregate, among index entries the snapshot keeps too.
	if _, err := pool.Exec(context.Background(), "ANALYZE outbox"); err != nil { // as autovacuum would
		t.Fatal(err)
	}
	batchAfter := timeBatch(t, pool, relay, "after")
	t.Logf("a batch of 100 rows published in %v before, %v after", batchBefore, batchAfter)
	if batchAfter > 3*batchBefore+20*time.Millisecond {
		t.Errorf("a batch of 100 rows published in %v after 400,000 rows passed under a held snapshot, %v before: the claim or the mark reads the index entries the snapshot keeps", batchAfter, batchBefore)
	}
}

// timeBatch writes 100 rows, each the second event of its aggregate (whose first is
// published), and times the relay's publishing them.
func timeBatch(t *testing.T, pool *pgxpool.Pool, relay *outbox.Relay, prefix string) time.Duration {
	t.Helper()
	writeEvents(t, pool, testenv.ExampleType, prefix, 100, 1)
	for n := 0; n < 100; {
		k, err := relay.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for a := range 100 {
			if _, err := outbox.Write(ctx, tx, outbox.Event{Source: "bookstore/test", Type: testenv.ExampleType, AggregateType: "order",
				AggregateID: fmt.Sprintf("%s-%05d", prefix, a), Sequence: 2, Data: map[string]int{"n": 2}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for n := 0; n < 100; {
		k, err := relay.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return time.Since(start)
}

// When a claim runs past its statement timeout while a snapshot is held for long,
// readiness names the snapshot, not only the timeout: the relay's own statement is not
// at fault, and the operator must find the session. Here the session that holds the
// snapshot also holds the outbox locked, so that every claim waits past its timeout.
func TestAClaimCancelledUnderAHeldSnapshotNamesTheSnapshotInReadiness(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	holder := holdSnapshot(t, pool)
	if _, err := holder.Exec(ctx, "LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	for range 1_000 { // transactions of their own, as a busy database's: the snapshot falls behind
		if _, err := pool.Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
	}
	config := pool.Config().Copy()
	config.ConnConfig.RuntimeParams["statement_timeout"] = "200" // ms
	bounded, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bounded.Close)
	relay := newRelay(t, bounded, amqpURL, tel, outbox.Config{ID: "snapshot"})
	if _, err := relay.RunOnce(ctx); !pgdb.TimedOut(err) {
		t.Fatalf("a claim of a locked outbox: %v, want the statement timeout", err)
	}
	err = relay.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "statement timeout") || !strings.Contains(err.Error(), "oldest snapshot") {
		t.Errorf("readiness after a claim cancelled under a held snapshot: %v; want the timeout and the snapshot named", err)
	}
}

// A row made pending again behind the frontier (an operator's replay of a dead row, an
// hour old) is published within the liveness bound (2 s): the sweep from the start of
// the table, every second, moves the frontier back to it.
func TestARowReplayedBehindTheFrontierIsPublishedWithinTheBound(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	var id string
	err := pool.QueryRow(ctx, `
		INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope, state, attempts)
		SELECT (lpad(to_hex((extract(epoch FROM now() - interval '1 hour') * 1000)::bigint), 12, '0') || '7000' || '8000' || '000000000001')::uuid,
		       'order', 'parked', 1, $1, 1, '{"specversion":"1.0"}', 'dead', 25
		RETURNING id::text`, testenv.ExampleType).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, newRelay(t, pool, amqpURL, tel, outbox.Config{ID: "replay"}))
	// A row written now and published: the relay's frontier has passed the dead row.
	writeEvents(t, pool, testenv.ExampleType, "now", 1, 1)
	testenv.Eventually(t, 10*time.Second, "the row written now published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})

	// As ops.RetryDeadRows does: back to pending, then NOTIFY outbox.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE outbox SET state = 'pending', attempts = 0, available_at = now() WHERE id = $1", id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify('outbox', '')")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Second, "the replayed row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE id = $1 AND state = 'published'", id) == 1
	})
}

// beginLateWrite writes one outbox row in a transaction it leaves open (rolled back when
// the test ends, unless committed): a writer paused mid transaction. It returns the
// transaction and the row's id.
func beginLateWrite(t *testing.T, pool *pgxpool.Pool) (pgx.Tx, string) {
	t.Helper()
	ctx := context.Background()
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = late.Rollback(context.Background()) })
	env, err := outbox.Write(ctx, late, outbox.Event{Source: "bookstore/test", Type: testenv.ExampleType,
		AggregateType: "order", AggregateID: "late", Sequence: 1, Data: map[string]int{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	return late, env.ID
}

// A row whose transaction commits 12 s after its id was made (a writer paused mid
// transaction: a GC pause, a frozen process), longer than the claim's commit window
// (10 s) behind a frontier that has moved past it, is published within the liveness
// bound (2 s) of its commit: the sweep finds it.
func TestARowThatCommitsLongAfterItsIDWasMadeIsPublishedWithinTheBound(t *testing.T) {
	t.Parallel() // it waits 12 s, as does the outage's test
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	runRelay(t, newRelay(t, pool, amqpURL, tel, outbox.Config{ID: "late"}))

	late, id := beginLateWrite(t, pool)
	time.Sleep(12 * time.Second) // the late transaction's pause is the fault
	// A row written and published meanwhile: the relay's frontier has moved past the
	// late row's id, and so has its commit window.
	writeEvents(t, pool, testenv.ExampleType, "meanwhile", 1, 1)
	testenv.Eventually(t, 10*time.Second, "the row written meanwhile published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Second, "the late row published within the bound of its commit", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE id = $1 AND state = 'published'", id) == 1
	})
}

// The same late row, for a relay without its sweep (RunOnce alone): under a snapshot held
// for most of an hour the sweep from the start of the table looked only every ~4 s (20
// times its own 216-238 ms), and a two-hour soak's late rows were published 3.6-3.7 s
// after their commit. The frontier's search starts no later than the ids made since the
// oldest transaction then writing began, so the claim after the commit takes the row.
func TestARowThatCommitsLongAfterItsIDWasMadeIsClaimedWithoutTheSweep(t *testing.T) {
	t.Parallel() // it waits 12 s, as does the test above
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	relay := newRelay(t, pool, amqpURL, tel, outbox.Config{ID: "late-no-sweep"})
	if _, err := relay.RunOnce(ctx); err != nil { // its one look from the start
		t.Fatal(err)
	}
	late, id := beginLateWrite(t, pool)
	// The relay claims on while the writer pauses, its frontier searched every second.
	for paused := time.Now(); time.Since(paused) < outbox.CommitWindow+2*time.Second; time.Sleep(200 * time.Millisecond) {
		if _, err := relay.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Second, "the late row published by the relay's claims within the bound of its commit", func() bool {
		if _, err := relay.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE id = $1 AND state = 'published'", id) == 1
	})
}

// The broker is unreachable for longer than the relay's commit window (10 s) while rows
// are written, after a while with nothing pending: no claim runs, and no search of the
// frontier with it. Once the broker is
// back the rows are published at once, though their ids are older than the window: the
// frontier covers every id made since its last search, however long ago that was, not
// only the last window before now (which would leave them to the next sweep, 30 s).
func TestRowsWrittenThroughAnOutageLongerThanTheCommitWindowArePublishedWhenItEnds(t *testing.T) {
	t.Parallel()
	pool, amqpURL, tel := setup(t)
	proxy, proxied := viaProxy(t, amqpURL)
	ctx := context.Background()
	relay := newRelay(t, pool, proxied, tel, outbox.Config{ID: "relay", OutageMax: 100 * time.Millisecond})
	runRelay(t, relay)
	writeEvents(t, pool, testenv.ExampleType, "before", 1, 1)
	testenv.Eventually(t, 10*time.Second, "the row written before the outage published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})

	// Idle for two polls (1 s each): the relay's last search before the outage found
	// nothing pending.
	time.Sleep(2 * time.Second)
	proxy.Cut()
	writeEvents(t, pool, testenv.ExampleType, "during", 5, 1)
	testenv.Eventually(t, 10*time.Second, "the relay sees the outage", func() bool { return relay.Ready(ctx) != nil })
	time.Sleep(11 * time.Second) // the outage is the fault: it must outlast the commit window
	proxy.Restore()
	testenv.Eventually(t, 5*time.Second, "the rows written during the outage published once it ended", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 6
	})
}

// A relay that starts while a snapshot has long been held (a process restarted, a new
// replica) publishes a new row at once: its first claim starts at the ids made just
// before it started. From the start of the table, its first search stepped over every
// entry the snapshot keeps and ran past the statement timeout, again on every try, for as
// long as the snapshot lasted (a two-hour soak: restarted relays timed out for 36 s, until
// a 46-minute snapshot ended). Rows pending from before are the sweep's to find.
func TestARelayStartedUnderALongHeldSnapshotPublishesANewRowAtOnce(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	holdSnapshot(t, pool)
	passThrough(t, pool, 400_000, time.Now().Add(-time.Hour).UnixMilli())
	config := pool.Config().Copy()
	config.ConnConfig.RuntimeParams["statement_timeout"] = "100" // ms: past a walk over the entries kept
	bounded, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bounded.Close)

	relay := newRelay(t, bounded, amqpURL, tel, outbox.Config{ID: "started"})
	writeEvents(t, pool, testenv.ExampleType, "new", 1, 1)
	if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
		t.Errorf("the first RunOnce of a relay started under a long-held snapshot: %d rows, %v; want the new row published", n, err)
	}
}

// A row left pending from before a relay started, older than the claim's commit window
// (a backlog a stopped relay left), is published within the liveness bound (2 s) of the
// start: the relay's first claims start at the ids made just before it, and its sweep
// from the start of the table, a second later, moves the frontier back to the row.
func TestARowPendingFromBeforeARelayStartedIsPublishedWithinTheBound(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	var id string
	err := pool.QueryRow(ctx, `
		INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope)
		SELECT (lpad(to_hex((extract(epoch FROM now() - interval '1 minute') * 1000)::bigint), 12, '0') || '7000' || '8000' || '000000000001')::uuid,
		       'order', 'left', 1, $1, 1, '{"specversion":"1.0"}'
		RETURNING id::text`, testenv.ExampleType).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, newRelay(t, pool, amqpURL, tel, outbox.Config{ID: "left"}))
	testenv.Eventually(t, 2*time.Second, "the row left pending published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE id = $1 AND state = 'published'", id) == 1
	})
}

// A relay driven by RunOnce alone (no Run, so no sweep beside it) publishes a row left
// pending from before it was made, older than the claim's commit window: its first batch
// looks from the start of the table once. Under -race in CI the nack test wrote its rows,
// took over 10 s to cap a queue, made its relay, and never saw one of them.
func TestTheFirstRunOnceOfARelayFindsARowLeftPendingFromBefore(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope)
		SELECT (lpad(to_hex((extract(epoch FROM now() - interval '1 minute') * 1000)::bigint), 12, '0') || '7000' || '8000' || '000000000002')::uuid,
		       'order', 'left-alone', 1, $1, 1, '{"specversion":"1.0"}'`, testenv.ExampleType)
	if err != nil {
		t.Fatal(err)
	}
	relay := newRelay(t, pool, amqpURL, tel, outbox.Config{ID: "alone"})
	if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
		t.Errorf("the first RunOnce: %d rows, %v; want the row left pending from before", n, err)
	}
}
