package outbox_test

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// viaProxy returns amqpURL with a proxy in between that the test can cut or stall.
func viaProxy(t *testing.T, amqpURL string) (*testenv.Proxy, string) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	return proxy, u.String()
}

// RabbitMQ is unreachable for far longer than the relay's whole retry budget (two
// attempts, milliseconds apart) while orders keep being written. An outage is not a
// message's failure: no attempt is spent and no row is parked, and once the broker is
// back every event is published exactly once, in sequence order within its aggregate.
func TestBrokerOutageLongerThanTheRelayBudgetSpendsNoAttempt(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	proxy, proxied := viaProxy(t, amqpURL)
	proxy.Cut()
	const aggregates, perAggregate = 20, 3
	writeEvents(t, pool, testenv.ExampleType, "order", aggregates, perAggregate)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := consumeAll(t, ctx, amqpURL, testenv.ExampleQueue)
	conn := broker.NewConn(proxied, "relay")
	defer conn.Close()
	cfg := outbox.Config{ID: "relay", MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond,
		OutageMax: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond}
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, time.Second), tel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = relay.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	// Each try of the relay during the outage is one refused connection.
	testenv.Eventually(t, 30*time.Second, "the relay tried ten times its budget", func() bool {
		return proxy.Refused() >= 10*cfg.MaxAttempts
	})
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending' AND attempts = 0"); n != aggregates*perAggregate {
		t.Fatalf("%d of %d rows pending with no attempt spent during the outage", n, aggregates*perAggregate)
	}

	proxy.Restore()
	testenv.Eventually(t, 30*time.Second, "every event received after the outage", func() bool {
		return got.distinct() == aggregates*perAggregate
	})
	testenv.Eventually(t, 10*time.Second, "every row marked published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published' AND attempts = 0") == aggregates*perAggregate
	})
	got.mu.Lock()
	defer got.mu.Unlock()
	if got.copies != aggregates*perAggregate {
		t.Errorf("%d deliveries of %d events: an outage should cost no duplicate here", got.copies, aggregates*perAggregate)
	}
	last := map[string]int{}
	for _, env := range got.order {
		seq, _ := strconv.Atoi(env.Sequence)
		if seq != last[env.Subject]+1 {
			t.Errorf("aggregate %s: sequence %d arrived after %d", env.Subject, seq, last[env.Subject])
		}
		last[env.Subject] = seq
	}
}

// The link to RabbitMQ goes silent in the middle of a batch: the broker's confirms never
// come. A confirm timeout is the link's failure, not the rows': the batch's claims are
// released with no attempt spent, and the rows are published once the link answers.
func TestConfirmTimeoutReleasesTheClaimsWithoutSpendingAttempts(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	proxy, proxied := viaProxy(t, amqpURL)
	conn := broker.NewConn(proxied, "relay")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 300*time.Millisecond), tel, outbox.Config{ID: "relay", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	writeEvents(t, pool, testenv.ExampleType, "first", 1, 1)
	if n, err := relay.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("first batch: %d rows, %v", n, err)
	}

	proxy.Stall()
	writeEvents(t, pool, testenv.ExampleType, "stalled", 5, 1)
	n, err := relay.RunOnce(ctx)
	if n != 5 || !broker.Unavailable(err) {
		t.Fatalf("batch on a stalled link: %d rows, err %v; want 5 and a broker-unavailable error", n, err)
	}
	if c := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending' AND attempts = 0 AND claimed_by IS NULL"); c != 5 {
		t.Fatalf("%d of 5 rows released with no attempt spent", c)
	}

	proxy.Restore()
	testenv.Eventually(t, 60*time.Second, "rows published once the link answers", func() bool {
		_, _ = relay.RunOnce(ctx)
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 6
	})
	if c := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE attempts > 0 OR state = 'dead'"); c != 0 {
		t.Errorf("%d rows spent attempts on a stalled link", c)
	}
}

// A lease shorter than a publish can take would let a second relay take rows over and
// publish them again while the first still waits for their confirms: refused at start.
func TestRelayRefusesALeaseAPublishCanOutlast(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	conn := broker.NewConn(amqpURL, "relay")
	defer conn.Close()
	pub := broker.NewPublisher(conn, sut.Topology, 10*time.Second)
	if _, err := outbox.NewRelay(pool, pub, tel, outbox.Config{Lease: 5 * time.Second}); err == nil {
		t.Error("a 5s lease under a 10s confirm timeout was accepted")
	}
	if _, err := outbox.NewRelay(pool, pub, tel, outbox.Config{Lease: 30 * time.Second}); err != nil {
		t.Errorf("a 30s lease under a 10s confirm timeout was refused: %v", err)
	}
}

// afterPublish is the relays' failpoint in these tests (Config.AfterPublishFailpoint).
const afterPublish = "relay/after-publish"

// holdAfterPublish declares the topology, so the test can watch the queue, and makes
// every relay of this test process that names afterPublish stop between the broker's ack
// and the mark for a while: the window in which another relay, an operator or a shutdown
// can come between.
func holdAfterPublish(t *testing.T, amqpURL string) {
	t.Helper()
	testenv.Declare(t, amqpURL, sut.Topology)
	names := []string{afterPublish}
	if err := failpoint.Configure(afterPublish+"=delay(3s)", names); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = failpoint.Configure("", names) })
}

// runOnceInBackground runs one batch of relay and returns its outcome on a channel.
func runOnceInBackground(relay *outbox.Relay) <-chan error {
	done := make(chan error, 1)
	go func() { _, err := relay.RunOnce(context.Background()); done <- err }()
	return done
}

// A row is parked as dead while its confirm is on the way (an operator, or a relay that
// took it over, gave up on it). The broker has the event, so the late confirm marks the
// row published: leaving it dead would report as lost an event its consumers have.
func TestALateConfirmMarksAParkedRowPublished(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	holdAfterPublish(t, amqpURL)
	writeEvents(t, pool, testenv.ExampleType, "late", 1, 1)
	conn := broker.NewConn(amqpURL, "relay")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, outbox.Config{ID: "relay", AfterPublishFailpoint: afterPublish})
	if err != nil {
		t.Fatal(err)
	}
	done := runOnceInBackground(relay)
	testenv.Eventually(t, 10*time.Second, "the event is in the queue", func() bool {
		return testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue) == 1
	})
	if _, err := pool.Exec(context.Background(), "UPDATE outbox SET state = 'dead'"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'"); n != 1 {
		t.Errorf("the confirmed row is not published after its late confirm")
	}
}

// Two processes are started under one RELAY_ID by mistake. While the first has a batch
// in flight (published, not yet marked), the second must not take those rows: it would
// publish them a second time. Only a process that holds the relay id alone retakes the
// id's claims at once, as a restarted relay does.
func TestTwoProcessesUnderOneRelayIDNeverShareInFlightRows(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	holdAfterPublish(t, amqpURL)
	writeEvents(t, pool, testenv.ExampleType, "twin", 3, 1)
	newRelay := func() *outbox.Relay {
		conn := broker.NewConn(amqpURL, "twin")
		t.Cleanup(func() { conn.Close() })
		relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, outbox.Config{ID: "twin", AfterPublishFailpoint: afterPublish})
		if err != nil {
			t.Fatal(err)
		}
		return relay
	}
	first, second := newRelay(), newRelay()
	done := runOnceInBackground(first)
	testenv.Eventually(t, 10*time.Second, "the first process's batch is in the queue", func() bool {
		return testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue) == 3
	})
	if n, err := second.RunOnce(context.Background()); n != 0 || err != nil {
		t.Errorf("the second process took %d rows in flight under the first's claim (err %v), want 0", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'"); n != 3 {
		t.Errorf("published rows = %d, want 3", n)
	}
}
