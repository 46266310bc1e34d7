package experiment

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// outboxDatabase is a fresh database with the platform's outbox.
func outboxDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin, dbURL := testenv.Database(t, "liveness")
	pool, err := pgdb.Open(t.Context(), admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// execAll runs each statement on pool, failing the test on the first error.
func execAll(t *testing.T, pool *pgxpool.Pool, sql ...string) {
	t.Helper()
	for _, q := range sql {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// passed leaves the index entries of n rows made an hour ago that were written pending
// and then published, as a relay's traffic does, under whatever snapshot is held: in
// chunks, each statement well within the role's statement timeout.
func passed(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	const chunk = 20_000
	for from := 0; from < n; from += chunk {
		if _, err := pool.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope)
			SELECT (lpad(to_hex((extract(epoch FROM now() - interval '1 hour') * 1000)::bigint + g), 12, '0') || '7' || substr(md5(g::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid,
			       'order', 'passed-' || g, 1, 'example.thing', 1, '{}'
			FROM generate_series($1::int, $1::int + $2::int - 1) g`, from, min(chunk, n-from)); err != nil {
			t.Fatal(err)
		}
		execAll(t, pool, `UPDATE outbox SET state = 'published', published_at = now() WHERE state = 'pending' AND aggregate_id LIKE 'passed-%'`)
	}
}

// medianSample times 21 samples of pool's outbox from front.
func medianSample(t *testing.T, pool *pgxpool.Pool, front *sampleFrontier) time.Duration {
	t.Helper()
	var took []time.Duration
	for range 21 {
		var s check.LivenessSample
		start := time.Now()
		if err := sampleOutbox(t.Context(), pool, front, time.Second, &s); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[len(took)/2]
}

// The liveness sampler reads each outbox three times a second for the whole run. Under a
// snapshot held for minutes every row pending since it began keeps an entry in the
// pending rows' index, and a look from the start of the table stepped over them all: a
// soak's long transaction made each look 270-480 ms after 20 minutes, most of a core of
// the Postgres the run measures. Between its paced looks from the start, a sample starts
// at the frontier, and costs no more after rows passed than before.
func TestALivenessSampleUnderAHeldSnapshotCostsNoMoreAfterRowsPassed(t *testing.T) {
	pool := outboxDatabase(t)
	snapshot, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer snapshot.Close(context.Background())
	if _, err := snapshot.Exec(t.Context(), "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM outbox LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	front := &sampleFrontier{}
	before := medianSample(t, pool, front)
	passed(t, pool, 200_000)
	execAll(t, pool, "ANALYZE outbox") // as autovacuum would
	after := medianSample(t, pool, front)
	t.Logf("median sample %v before, %v after 200,000 rows passed under the snapshot", before, after)
	if after > 3*before+2*time.Millisecond {
		t.Errorf("median sample %v after 200,000 rows passed under a held snapshot, %v before: the sample steps over the rows pending since the snapshot began", after, before)
	}
}

// Between its looks from the start a sample reads from the frontier, so a row committed
// long after its id was made (a late commit) is not in it; the next look from the
// start, at most fullLookShare times its own time later, counts it.
func TestALivenessSampleSeesARowCommittedBehindItsFrontierAtItsNextLookFromTheStart(t *testing.T) {
	pool := outboxDatabase(t)
	front := &sampleFrontier{}
	var s check.LivenessSample
	if err := sampleOutbox(t.Context(), pool, front, time.Second, &s); err != nil {
		t.Fatal(err)
	}
	execAll(t, pool, `INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope)
		VALUES ((lpad(to_hex((extract(epoch FROM now() - interval '1 minute') * 1000)::bigint), 12, '0') || '7000-8000-000000000000')::uuid,
		        'order', 'late', 1, 'example.thing', 1, '{}')`)
	if err := sampleOutbox(t.Context(), pool, front, time.Second, &s); err != nil {
		t.Fatal(err)
	}
	if s.Backlog != 0 {
		t.Fatalf("a sample between looks from the start counted %d pending rows behind its frontier", s.Backlog)
	}
	testenv.Eventually(t, 10*time.Second, "the late row counted by a look from the start", func() bool {
		var s check.LivenessSample
		if err := sampleOutbox(t.Context(), pool, front, time.Second, &s); err != nil {
			t.Fatal(err)
		}
		return s.Backlog == 1 && s.Claimable == 1
	})
}
