package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// The tests of Drain, the relay's fast form: two batches in flight, the mark of one batch
// and the claim of a later one in one statement.

// newDrainRelay is a relay of small batches, so that a few dozen rows make a backlog.
func newDrainRelay(t *testing.T, pool *pgxpool.Pool, amqpURL string, tel *telemetry.Telemetry, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	conn := broker.NewConn(amqpURL, cfg.ID)
	t.Cleanup(func() { _ = conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// drainUntil calls Drain until the query counts want, or fails the test.
func drainUntil(t *testing.T, pool *pgxpool.Pool, relay *outbox.Relay, what, query string, want int) {
	t.Helper()
	for range 200 {
		if _, err := relay.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		if testenv.Count(t, pool, query) == want {
			return
		}
	}
	t.Fatalf("%s: %d after 200 drains, want %d", what, testenv.Count(t, pool, query), want)
}

// A backlog drained with two batches in flight: the claim of each batch skips the rows
// still in flight (they carry this process's claim token, which a claim otherwise takes
// back at once), and the statement that marks a batch lets the next event of its
// aggregates be claimed at once. Every event arrives once, each aggregate's in sequence.
func TestDrainWithTwoBatchesInFlightPublishesEveryEventOnceInOrder(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	// 40 aggregates of 10, written sequence by sequence, in batches of 16: a batch holds
	// heads of several waves, and the batch after next the events the mark let through.
	const aggregates, perAggregate = 40, 10
	writeEvents(t, pool, testenv.ExampleType, "order", aggregates, perAggregate)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := consumeAll(t, ctx, amqpURL, testenv.ExampleQueue)

	relay := newDrainRelay(t, pool, amqpURL, tel, outbox.Config{ID: "drain", BatchSize: 16})
	drainUntil(t, pool, relay, "rows published", "SELECT count(*) FROM outbox WHERE state = 'published'", aggregates*perAggregate)
	testenv.Eventually(t, 10*time.Second, "every event received", func() bool { return got.distinct() == aggregates*perAggregate })

	got.mu.Lock()
	defer got.mu.Unlock()
	if got.copies != aggregates*perAggregate {
		t.Errorf("%d deliveries of %d events: a row in flight was claimed and published again", got.copies, aggregates*perAggregate)
	}
	last := map[string]int{}
	for _, env := range got.order {
		seq, _ := strconv.Atoi(env.Sequence)
		if seq != last[env.Subject]+1 {
			t.Fatalf("aggregate %s: sequence %d arrived after %d", env.Subject, seq, last[env.Subject])
		}
		last[env.Subject] = seq
	}
}

// An aggregate's event is in flight when the next batch is claimed, and the broker then
// returns it (no queue bound). The aggregate's next event must not have gone out in the
// meantime: in flight is not published. Here the event is parked at its first return,
// and the event behind it stays pending, never delivered, while other aggregates flow.
func TestDrainHoldsTheNextEventOfAnAggregateWhoseEventIsInFlight(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	write := func(typ, aggregate string, seq int64) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := outbox.Write(ctx, tx, outbox.Event{Source: "bookstore/test", Type: typ, AggregateType: "order", AggregateID: aggregate, Sequence: seq, Data: map[string]int64{"n": seq}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// In write order, so in claim order: the first batch of 4 is stuck-1 and free-0..2;
	// the second, claimed while the first is in flight, has room for stuck-2.
	write("nobody.listens.v1", "stuck", 1)
	for i := range 5 {
		write(testenv.ExampleType, fmt.Sprint("free-", i), 1)
	}
	write(testenv.ExampleType, "stuck", 2)

	relay := newDrainRelay(t, pool, amqpURL, tel, outbox.Config{ID: "drain", BatchSize: 4, MaxAttempts: 1})
	drainUntil(t, pool, relay, "free events published", "SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'free-%' AND state = 'published'", 5)

	if state := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE aggregate_id = 'stuck' AND sequence = 1 AND state = 'dead'"); state != 1 {
		t.Errorf("stuck-1, returned once with a budget of one attempt, is not dead")
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE aggregate_id = 'stuck' AND sequence = 2 AND state = 'pending'"); n != 1 {
		t.Errorf("stuck-2 is not pending behind its parked predecessor: it was claimed while stuck-1 was in flight")
	}
	for _, d := range sut.Drain(t, amqpURL, testenv.ExampleQueue, 300*time.Millisecond) {
		var env struct {
			Subject  string `json:"subject"`
			Sequence string `json:"sequence"`
		}
		if err := json.Unmarshal(d.Body, &env); err != nil {
			t.Fatal(err)
		}
		if env.Subject == "stuck" {
			t.Errorf("stuck-%s was delivered ahead of stuck-1, which never was", env.Sequence)
		}
	}
}

// A relay process dies between the broker's acks and the mark with two batches in
// flight (the failpoint set to error stands for the kill). No row is lost: the restarted
// relay, under the same id, takes both batches back at once and publishes them again,
// with the same ids, for the consumers' inboxes to drop; every other row goes once.
func TestACrashWithTwoBatchesInFlightLosesNoRowAndRepeatsOnlyThoseTwo(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	if err := sut.Topology.Declare(sut.Channel(t, amqpURL)); err != nil {
		t.Fatal(err)
	}
	names := []string{afterPublish}
	if err := failpoint.Configure(afterPublish+"=error", names); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = failpoint.Configure("", names) })
	const rows, batch = 7, 2
	writeEvents(t, pool, testenv.ExampleType, "crash", rows, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := consumeAll(t, ctx, amqpURL, testenv.ExampleQueue)

	dying := newDrainRelay(t, pool, amqpURL, tel, outbox.Config{ID: "crash", BatchSize: batch, AfterPublishFailpoint: afterPublish})
	if _, err := dying.Drain(context.Background()); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("Drain = %v, want the injected crash", err)
	}
	testenv.Eventually(t, 10*time.Second, "both batches in flight delivered", func() bool { return got.distinct() == 2*batch })
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'"); n != 0 {
		t.Fatalf("%d rows marked published by a relay that died before marking", n)
	}

	restarted := newDrainRelay(t, pool, amqpURL, tel, outbox.Config{ID: "crash", BatchSize: batch, PollInterval: 50 * time.Millisecond})
	runRelay(t, restarted)
	testenv.Eventually(t, 30*time.Second, "every row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == rows
	})
	testenv.Eventually(t, 10*time.Second, "every event received", func() bool { return got.distinct() == rows })
	got.mu.Lock()
	defer got.mu.Unlock()
	if want := rows + 2*batch; got.copies != want {
		t.Errorf("%d deliveries, want %d: the %d rows of the two batches in flight twice, the others once", got.copies, want, 2*batch)
	}
	for id, n := range got.ids {
		if n > 2 {
			t.Errorf("event %s delivered %d times", id, n)
		}
	}
}

// While a relay has two batches in flight, a second relay claims none of their rows:
// each claim, the plain one and the one that marks a batch too, writes the lease.
func TestASecondRelayClaimsNothingOfTwoBatchesInFlight(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	holdAfterPublish(t, amqpURL)
	writeEvents(t, pool, testenv.ExampleType, "leased", 4, 1)
	first := newDrainRelay(t, pool, amqpURL, tel, outbox.Config{ID: "first", BatchSize: 2, AfterPublishFailpoint: afterPublish})
	second := newDrainRelay(t, pool, amqpURL, tel, outbox.Config{ID: "second", BatchSize: 2})
	done := make(chan error, 1)
	go func() { _, err := first.Drain(context.Background()); done <- err }()
	testenv.Eventually(t, 10*time.Second, "both of the first relay's batches are in the queue", func() bool {
		return testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue) == 4
	})
	if n, err := second.RunOnce(context.Background()); n != 0 || err != nil {
		t.Errorf("the second relay claimed %d rows in flight under the first's lease (err %v), want 0", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'"); n != 4 {
		t.Errorf("published rows = %d, want 4", n)
	}
	if n := testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue); n != 4 {
		t.Errorf("queue depth %d, want the 4 events once", n)
	}
}
