package outbox_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

func setup(t testing.TB) (*pgxpool.Pool, string, *telemetry.Telemetry) {
	t.Helper()
	admin, dbURL := testenv.Database(t, "outbox")
	ctx := context.Background()
	pool, err := pgdb.Open(ctx, admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "test", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	// The test is the deployment: the topology exists before any relay publishes.
	amqpURL := testenv.VHost(t)
	sut.Channel(t, amqpURL)
	return pool, amqpURL, tel
}

// sut is the system under test, as testenv's helpers see it.
// The platform knows no system: its tests speak the example system's names.
var sut = testenv.System{Topology: testenv.ExampleTopology}

// writeEvents writes aggregates×perAggregate outbox rows, sequences 1..perAggregate for
// each aggregate, in a few large transactions.
func writeEvents(t testing.TB, pool *pgxpool.Pool, typ, prefix string, aggregates, perAggregate int) {
	t.Helper()
	ctx := context.Background()
	for seq := 1; seq <= perAggregate; seq++ {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for a := range aggregates {
				_, err := outbox.Write(ctx, tx, outbox.Event{
					Source: "bookstore/test", Type: typ, AggregateType: "order",
					AggregateID: fmt.Sprintf("%s-%05d", prefix, a), Sequence: int64(seq),
					Data: map[string]int{"n": seq},
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// received is what a test consumer saw: every delivery's event id, subject and sequence
// in arrival order.
type received struct {
	mu     sync.Mutex
	ids    map[string]int
	order  []event.Envelope
	copies int
}

func consumeAll(t testing.TB, ctx context.Context, amqpURL, queue string) *received {
	t.Helper()
	ch := sut.Channel(t, amqpURL)
	if err := ch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &received{ids: map[string]int{}}
	go func() {
		for d := range deliveries {
			env, err := event.Decode(d.Body, d.Type)
			if err != nil {
				t.Errorf("relay published an invalid envelope: %v", err)
				continue
			}
			r.mu.Lock()
			r.ids[env.ID]++
			r.copies++
			r.order = append(r.order, env)
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *received) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// Two relays race over 10,000 rows: every event reaches the queue, events of one
// aggregate arrive in sequence order, and the test reports how many copies were extra.
func TestTwoRelaysRaceOverTenThousandRows(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	// 100 aggregates of 100 events, written sequence by sequence: one claim of 200 rows
	// would span two sequences of every aggregate, and the two relays' claims the next
	// ones. Only the claim's per-aggregate guard keeps them in order; with 2,500 aggregates
	// of 4 an aggregate's next event was 2,500 rows on, and removing the guard went unseen.
	const aggregates, perAggregate = 100, 100
	writeEvents(t, pool, testenv.ExampleType, "order", aggregates, perAggregate)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := consumeAll(t, ctx, amqpURL, testenv.ExampleQueue)

	var wg sync.WaitGroup
	for _, id := range []string{"relay-a", "relay-b"} {
		conn := broker.NewConn(amqpURL, id)
		defer conn.Close()
		relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, outbox.Config{ID: id, BatchSize: 200, PollInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = relay.Run(ctx) }()
	}
	start := time.Now()
	testenv.Eventually(t, 2*time.Minute, "all 10,000 events received", func() bool { return got.distinct() == aggregates*perAggregate })
	elapsed := time.Since(start)
	// The last batch reaches the queue a moment before its rows are marked.
	testenv.Eventually(t, 30*time.Second, "every row marked published", func() bool {
		var n int
		return pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE state <> 'published'").Scan(&n) == nil && n == 0
	})
	cancel()
	wg.Wait()

	var pending int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE state <> 'published'").Scan(&pending); err != nil || pending != 0 {
		t.Errorf("rows not published: %d (%v)", pending, err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	last := map[string]int{}
	for _, env := range got.order {
		seq, _ := strconv.Atoi(env.Sequence)
		if seq < last[env.Subject] {
			continue // a duplicate of an earlier event: harmless for an idempotent consumer
		}
		if seq != last[env.Subject]+1 && seq != last[env.Subject] {
			t.Fatalf("aggregate %s: sequence %d arrived after %d", env.Subject, seq, last[env.Subject])
		}
		last[env.Subject] = seq
	}
	t.Logf("10,000 events by two relays in %v (%.0f events/s); deliveries %d, duplicates %d",
		elapsed.Round(time.Millisecond), float64(aggregates*perAggregate)/elapsed.Seconds(), got.copies, got.copies-len(got.ids))
}

// A relay that dies holding a claim delays its rows by at most the lease: another relay
// takes them over once it expires.
func TestExpiredClaimIsTakenOverByAnotherRelay(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	writeEvents(t, pool, testenv.ExampleType, "order", 3, 1)
	ctx := context.Background()
	// relay-dead claims the rows and "dies" before publishing: only its claim is left.
	if _, err := pool.Exec(ctx, "UPDATE outbox SET claimed_by = 'relay-dead', claimed_until = now() + interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	conn := broker.NewConn(amqpURL, "relay-b")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, outbox.Config{ID: "relay-b"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("claimed %d rows under a live lease (err %v), want 0", n, err)
	}
	time.Sleep(1100 * time.Millisecond)
	if n, err := relay.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("after the lease: claimed %d rows (err %v), want 3", n, err)
	}
}

// An event no queue is bound for comes back from the broker (mandatory): it is not marked
// published, its attempts and error are recorded, and after MaxAttempts it is parked as
// dead, while another aggregate's events still flow.
func TestUnroutableEventIsRetriedThenParkedWithoutBlockingOthers(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	writeEvents(t, pool, "nobody.listens.v1", "stuck", 1, 2) // one aggregate, sequences 1 and 2
	writeEvents(t, pool, testenv.ExampleType, "free", 1, 1)  // another aggregate
	ctx := context.Background()
	conn := broker.NewConn(amqpURL, "relay")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel,
		outbox.Config{ID: "relay", MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := relay.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rows, err := pool.Query(ctx, "SELECT event_type, sequence, state, attempts, coalesce(last_error, '') FROM outbox ORDER BY event_type, sequence")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		typ, state, lastErr string
		seq                 int64
		attempts            int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.typ, &x.seq, &x.state, &x.attempts, &x.lastErr)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ, state string
		seq        int64
		attempts   int
	}{
		{testenv.ExampleType, "published", 1, 0}, // another aggregate is not blocked
		{"nobody.listens.v1", "dead", 1, 3},      // returned three times, then parked
		{"nobody.listens.v1", "pending", 2, 0},   // waits behind it: order within an aggregate holds
	}
	if len(got) != len(want) {
		t.Fatalf("rows = %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if g.typ != w.typ || g.seq != w.seq || g.state != w.state || g.attempts != w.attempts {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
	if got[1].lastErr == "" {
		t.Errorf("the dead row has no last_error")
	}
}

// Published rows past the retention period are deleted; newer and unpublished ones stay.
func TestCleanupDeletesOnlyOldPublishedRows(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	writeEvents(t, pool, testenv.ExampleType, "order", 2500, 1)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `UPDATE outbox SET state = 'published', published_at = now() - interval '4 days'
		WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT 2400)`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `UPDATE outbox SET state = 'published', published_at = now()
		WHERE id IN (SELECT id FROM outbox WHERE state = 'pending' ORDER BY id LIMIT 50)`)
	if err != nil {
		t.Fatal(err)
	}
	conn := broker.NewConn(amqpURL, "relay")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, time.Second), tel, outbox.Config{Retention: 72 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	n, err := relay.Cleanup(ctx)
	if err != nil || n != 2400 {
		t.Fatalf("deleted %d (err %v), want 2400 in batches", n, err)
	}
	var left int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&left)
	if left != 100 {
		t.Errorf("rows left = %d, want 100", left)
	}
}
