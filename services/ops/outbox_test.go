package ops_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/ops"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// sut is the system under test, as testenv's helpers see it: the example system.
var sut = testenv.System{Topology: testenv.ExampleTopology}

// setup gives a test a migrated outbox database and a virtual host with the topology.
func setup(t *testing.T) (*pgxpool.Pool, string, *telemetry.Telemetry) {
	t.Helper()
	admin, dbURL := testenv.Database(t, "ops")
	pool, err := pgdb.Open(context.Background(), admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "test", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	amqpURL := testenv.VHost(t)
	sut.Channel(t, amqpURL)
	return pool, amqpURL, tel
}

// writeEvents writes perAggregate events of typ, in sequence, for each of aggregates
// aggregates: one transaction per sequence number.
func writeEvents(t *testing.T, pool *pgxpool.Pool, typ, prefix string, aggregates, perAggregate int) {
	t.Helper()
	for seq := 1; seq <= perAggregate; seq++ {
		err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
			for a := range aggregates {
				_, err := outbox.Write(context.Background(), tx, outbox.Event{Source: "bookstore/test", Type: typ, AggregateType: "order",
					AggregateID: fmt.Sprintf("%s-%05d", prefix, a), Sequence: int64(seq), Data: map[string]int{"n": seq}})
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

// parkedType is an event type no queue is bound to until a test "fixes" it: the broker
// returns every publish of it, and the relay parks the row after MaxAttempts returns.
const parkedType = "parked.thing.v1"

// parkingRelay is a relay that parks a row after two refused publishes, with retry delays
// of a millisecond, so a test reaches "dead" in a few batches.
func parkingRelay(t *testing.T, pool *pgxpool.Pool, amqpURL string, tel *telemetry.Telemetry, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	conn := broker.NewConn(amqpURL, "relay-"+t.Name())
	t.Cleanup(func() { _ = conn.Close() })
	pub := broker.NewPublisher(conn, sut.Topology, 10*time.Second)
	t.Cleanup(pub.Close)
	cfg.MaxAttempts, cfg.BackoffBase, cfg.BackoffMax = 2, time.Millisecond, 2*time.Millisecond
	relay, err := outbox.NewRelay(pool, pub, tel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// parkAll runs batches until n rows are dead.
func parkAll(t *testing.T, pool *pgxpool.Pool, relay *outbox.Relay, n int) []ops.DeadRow {
	t.Helper()
	var dead []ops.DeadRow
	testenv.Eventually(t, 30*time.Second, "rows parked as dead", func() bool {
		if _, err := relay.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		var err error
		dead, err = ops.ListDeadRows(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		return len(dead) == n
	})
	return dead
}

func rowState(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (state string, attempts int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), "SELECT state, attempts FROM outbox WHERE id = $1", id).Scan(&state, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	return state, attempts
}

// bindQueue is the fix: a queue for parkedType, read by the test.
func bindQueue(t *testing.T, amqpURL, queue string) *amqp.Channel {
	t.Helper()
	ch := sut.Channel(t, amqpURL)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, parkedType, sut.Topology.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return ch
}

// everything returns the ids of every message in queue, in order: it puts a marker at the
// queue's tail and reads up to it, so whatever was published before is counted, with no
// guess at how long to wait for a late copy.
func everything(t *testing.T, ch *amqp.Channel, queue string) []string {
	t.Helper()
	if err := ch.PublishWithContext(context.Background(), "", queue, true, false, amqp.Publishing{MessageId: "marker"}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	testenv.Eventually(t, 10*time.Second, "the marker at the end of "+queue, func() bool {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return false
			}
			if d.MessageId == "marker" {
				return true
			}
			ids = append(ids, d.MessageId)
		}
	})
	return ids
}

// A row parked because no queue was bound for its type blocks the event after it. Once
// the binding exists, RetryDeadRows returns it to the relay, which is woken at once (its poll
// interval is an hour here) and publishes it exactly once; then the event it held back
// follows, once.
func TestRetryingADeadRowPublishesTheParkedEventOnceAndThenTheEventBehindIt(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	writeEvents(t, pool, parkedType, "stuck", 1, 2) // one aggregate, sequences 1 and 2
	relay := parkingRelay(t, pool, amqpURL, tel, outbox.Config{ID: "relay", PollInterval: time.Hour, CleanupInterval: time.Hour})

	dead := parkAll(t, pool, relay, 1)
	d := dead[0]
	if d.Sequence != 1 || d.EventType != parkedType || d.AggregateType != "order" || d.AggregateID != "stuck-00000" ||
		d.Attempts != 2 || d.LastError == "" || d.Blocked != 1 || d.CreatedAt.IsZero() {
		t.Fatalf("dead row = %+v, want sequence 1 of order stuck-00000, 2 attempts, its error, 1 event blocked behind it", d)
	}

	ch := bindQueue(t, amqpURL, "test.parked")
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	// The relay has nothing to claim (the dead row, and the row behind it) and waits for
	// a notification: wait until it is listening, so the one RetryDeadRows sends is heard.
	testenv.Eventually(t, 10*time.Second, "the relay listening", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN outbox'") == 1
	})

	n, err := ops.RetryDeadRows(context.Background(), pool)
	if err != nil || n != 1 {
		t.Fatalf("RetryDeadRows = %d, %v; want 1, nil", n, err)
	}
	testenv.Eventually(t, 10*time.Second, "the retried row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published' AND id = $1", d.ID) == 1
	})
	// The row behind it became claimable when the first was marked, which sends no
	// notification: it leaves with the next batch, which the next write starts if nothing
	// else did (here, and not an hour's poll later). The relay is stopped only once all is
	// marked: stopped in the middle of a batch, it would publish that batch again, as it must.
	writeEvents(t, pool, parkedType, "later", 1, 1)
	testenv.Eventually(t, 10*time.Second, "every row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 3
	})
	cancel()
	<-stopped

	got := everything(t, ch, "test.parked")
	var want []string
	rows, err := pool.Query(context.Background(), "SELECT id::text FROM outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		want = append(want, id)
	}
	if !slices.Equal(got, want) {
		t.Errorf("queue received %v, want each event once, in write order: %v", got, want)
	}
	if dead, _ := ops.ListDeadRows(context.Background(), pool); len(dead) != 0 {
		t.Errorf("dead rows after the retry: %+v", dead)
	}
}

// A retried row gets the whole budget again, not one last try: with the cause not fixed
// yet, its next refused publish counts as its first.
func TestRetriedRowHasAFullAttemptBudgetAgain(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	writeEvents(t, pool, parkedType, "stuck", 1, 1)
	relay := parkingRelay(t, pool, amqpURL, tel, outbox.Config{ID: "relay"})
	id := parkAll(t, pool, relay, 1)[0].ID

	if n, err := ops.RetryDeadRows(context.Background(), pool, id); err != nil || n != 1 {
		t.Fatalf("RetryDeadRows(%s) = %d, %v; want 1, nil", id, n, err)
	}
	if state, attempts := rowState(t, pool, id); state != "pending" || attempts != 0 {
		t.Fatalf("after RetryDeadRows the row is %s with %d attempts, want pending with 0", state, attempts)
	}
	testenv.Eventually(t, 10*time.Second, "the retried row refused once more", func() bool {
		if _, err := relay.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, attempts := rowState(t, pool, id)
		return attempts > 0
	})
	if state, attempts := rowState(t, pool, id); state != "pending" || attempts != 1 {
		t.Errorf("after one more refused publish the row is %s with %d attempts, want pending with 1 of 2", state, attempts)
	}
}

func TestRetryingDeadRowsByIDMovesOnlyThoseRowsAndRefusesAnyThatIsNotDead(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	writeEvents(t, pool, parkedType, "stuck", 3, 1)
	writeEvents(t, pool, testenv.ExampleType, "free", 1, 1)
	relay := parkingRelay(t, pool, amqpURL, tel, outbox.Config{ID: "relay"})
	dead := parkAll(t, pool, relay, 3)
	a, b, c := dead[0].ID, dead[1].ID, dead[2].ID
	var published uuid.UUID
	if err := pool.QueryRow(context.Background(), "SELECT id FROM outbox WHERE state = 'published'").Scan(&published); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadIDs := func() []uuid.UUID {
		rows, err := ops.ListDeadRows(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uuid.UUID
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}

	if n, err := ops.RetryDeadRows(ctx, pool, b, b); err != nil || n != 1 {
		t.Fatalf("RetryDeadRows(b, b) = %d, %v; want 1, nil", n, err)
	}
	if got := deadIDs(); !slices.Equal(got, []uuid.UUID{a, c}) {
		t.Errorf("dead after retrying b: %v, want [a c] = %v", got, []uuid.UUID{a, c})
	}
	for _, ids := range [][]uuid.UUID{{a, uuid.New()}, {a, b}, {a, published}} {
		if n, err := ops.RetryDeadRows(ctx, pool, ids...); !errors.Is(err, ops.ErrNotDead) || n != 0 {
			t.Errorf("RetryDeadRows(%v) = %d, %v; want 0, ErrNotDead", ids, n, err)
		}
	}
	if got := deadIDs(); !slices.Equal(got, []uuid.UUID{a, c}) {
		t.Errorf("a refused retry moved rows: dead now %v, want [a c]", got)
	}
	if n, err := ops.RetryDeadRows(ctx, pool); err != nil || n != 2 {
		t.Errorf("RetryDeadRows() = %d, %v; want 2, nil", n, err)
	}
	if n, err := ops.RetryDeadRows(ctx, pool); err != nil || n != 0 {
		t.Errorf("RetryDeadRows() with nothing dead = %d, %v; want 0, nil", n, err)
	}
}
