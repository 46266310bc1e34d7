package consumer_test

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// The handler's database is unreachable for longer than the queue's delivery limit times
// the consumer's backoff: long enough that requeueing each failure would have
// dead-lettered every message. The consumer pauses instead, nothing reaches the DLQ,
// each message reaches the handler at most twice and has spent at most one delivery, and
// all of them are processed once the database is back, without a restart.
func TestDatabaseOutageLongerThanTheDeliveryLimitDeadLettersNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	u, err := url.Parse(h.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	h.db = testenv.Pool(t, u.String())
	c := h.run(t, func(cfg *consumer.Config) { cfg.RetryBase, cfg.RetryMax = 5*time.Millisecond, 20*time.Millisecond })
	testenv.Eventually(t, 10*time.Second, "consumer consuming", func() bool { return c.Ready(context.Background()) == nil })

	proxy.Cut()
	const n = 10
	ids := make([]string, n)
	for i := range n {
		env, body := envelope(t, "order-"+string(rune('a'+i)), map[string]int{"n": i})
		ids[i] = env.ID
		h.publish(t, env.ID, env.Type, body)
	}
	// Every health check during the outage is one refused connection: wait for three
	// times as many as the delivery limit, each at least half a backoff apart.
	testenv.Eventually(t, 60*time.Second, "the outage outlasts the delivery limit", func() bool {
		return proxy.Refused() >= 3*broker.DeliveryLimit
	})
	if c.Ready(context.Background()) == nil {
		t.Error("the consumer reports itself consuming while its database is down")
	}
	if d := testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq"); d != 0 {
		t.Fatalf("%d valid messages dead-lettered during a database outage", d)
	}

	proxy.Restore()
	testenv.Eventually(t, 30*time.Second, "every message processed after the outage", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == n
	})
	for _, id := range ids {
		if calls := h.callsOf(id); calls > 2 {
			t.Errorf("message %s reached the handler %d times, want at most 2", id, calls)
		}
		// The channel's close at the outage returned what the consumer held, once; the
		// broker counts that return (TestEveryReturnToTheQueueSpendsOneDeliveryOnEitherVersion),
		// and nothing else of the outage.
		if counts := h.deliveryCounts(id); len(counts) == 0 || slices.Max(counts) > 1 {
			t.Errorf("message %s handled with x-delivery-count %v, want at most 1: the outage spent more than one delivery", id, counts)
		}
	}
	if d := testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq"); d != 0 {
		t.Errorf("DLQ has %d messages, want 0", d)
	}
	testenv.Eventually(t, 10*time.Second, "consumer consuming again", func() bool { return c.Ready(context.Background()) == nil })
}

// Someone deletes the queue and declares it again while the service consumes. RabbitMQ
// cancels the consumer (basic.cancel); the consumer reports that it is not consuming,
// subscribes again by itself, and the next message is processed.
func TestConsumerResubscribesAfterItsQueueIsDeletedAndDeclaredAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// A slow first retry keeps the gap open long enough to be seen.
	c := h.run(t, func(cfg *consumer.Config) { cfg.RetryBase = time.Second })
	testenv.Eventually(t, 10*time.Second, "consumer consuming", func() bool { return c.Ready(context.Background()) == nil })

	q := sut.Topology.Queues[0]
	if q.Name != testenv.ExampleQueue {
		t.Fatalf("sut.Topology.Queues[0] is %s", q.Name)
	}
	if _, err := h.ch.QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "consumer reports it is not consuming", func() bool { return c.Ready(context.Background()) != nil })
	testenv.Declare(t, h.amqpURL, sut.Topology)
	testenv.Eventually(t, 15*time.Second, "consumer consuming again", func() bool { return c.Ready(context.Background()) == nil })

	env, body := envelope(t, "order-1", map[string]int{"n": 1})
	h.publish(t, env.ID, env.Type, body)
	testenv.Eventually(t, 10*time.Second, "message after the re-declare processed", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == 1
	})
}

// At shutdown the consumer finishes the delivery it is working on and starts none of
// those the broker had already pushed to it: they go back to the queue for the next
// process, instead of each being given a fresh handler budget after SIGTERM.
func TestShutdownReturnsPrefetchedDeliveriesUnstarted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	var once sync.Once
	handle := func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		started <- struct{}{}
		once.Do(func() { <-release }) // the first delivery is still at work at shutdown
		return h.handle(ctx, env)
	}

	tel := telemetryFor(t)
	conn := broker.NewConn(h.amqpURL, "consumer-test")
	defer conn.Close()
	c, err := consumer.New(conn, tel, consumer.Config{
		Name: "test", Queue: testenv.ExampleQueue, Types: []string{testenv.ExampleType}, Topology: sut.Topology, Producer: testenv.Login(h.amqpURL),
		Concurrency: 1, Prefetch: 10,
	}, handle)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		env, body := envelope(t, "order-"+string(rune('a'+i)), map[string]int{"n": i})
		h.publish(t, env.ID, env.Type, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	<-started
	testenv.Eventually(t, 10*time.Second, "the other deliveries prefetched", func() bool {
		return testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue) == 0
	})
	cancel()
	close(release)
	<-done

	if got := h.count(t, "SELECT count(*) FROM work"); got != 1 {
		t.Errorf("processed %d messages after shutdown began, want only the one at work", got)
	}
	// The channel's close returns them; a quorum queue counts them ready again a moment
	// after the close-ok, through its log.
	testenv.Eventually(t, 10*time.Second, "the deliveries not started back in the queue", func() bool {
		return testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue) == n-1
	})
	if got := h.count(t, "SELECT count(*) FROM work"); got != 1 {
		t.Errorf("processed %d messages, want only the one at work at shutdown", got)
	}
}

// The database answers but refuses every message's work: a privilege revoked from the
// service's role (a misconfigured deployment), as a migration that has not run (an
// undefined table) or a standby after a failover (a read-only transaction) would. That is
// an outage of the database, not a fault of the message, although a ping succeeds: the
// consumer holds the delivery and tries it again after a pause, for longer than the
// queue's delivery limit would have allowed requeues, spends no delivery, reports it is
// not consuming, and processes everything once the privilege is granted again.
func TestAPrivilegeTheDatabaseRefusesPausesTheConsumerAndSpendsNoDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := h.run(t, func(cfg *consumer.Config) { cfg.RetryBase, cfg.RetryMax = time.Millisecond, 5*time.Millisecond })
	testenv.Eventually(t, 10*time.Second, "consumer consuming", func() bool { return c.Ready(context.Background()) == nil })

	ctx := context.Background()
	if _, err := h.pool.Exec(ctx, "REVOKE INSERT ON inbox FROM CURRENT_USER"); err != nil {
		t.Fatal(err)
	}
	const n = 3
	ids := make([]string, n)
	for i := range n {
		env, body := envelope(t, "refused-"+string(rune('a'+i)), map[string]int{"n": i})
		ids[i] = env.ID
		h.publish(t, env.ID, env.Type, body)
	}
	// Each try is one call of the handler: wait until the first message has been tried
	// well past the delivery limit, or has been dead-lettered.
	testenv.Eventually(t, 60*time.Second, "the refusal outlasts the delivery limit", func() bool {
		return h.callsOf(ids[0]) > broker.DeliveryLimit+10 || testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq") > 0
	})
	if d := testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq"); d != 0 {
		t.Fatalf("%d valid messages dead-lettered while the database refused the work", d)
	}
	if err := c.Ready(ctx); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("Ready while the database refuses the work = %v, want the refusal", err)
	}

	if _, err := h.pool.Exec(ctx, "GRANT INSERT ON inbox TO CURRENT_USER"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "every message processed once the privilege is back", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == n
	})
	testenv.Eventually(t, 10*time.Second, "consumer consuming again", func() bool { return c.Ready(ctx) == nil })
	if d := testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq"); d != 0 {
		t.Errorf("DLQ has %d messages, want 0", d)
	}
	// Every try was of the first delivery, held: the queue counted none of them.
	for _, id := range ids {
		if counts := h.deliveryCounts(id); len(counts) == 0 || slices.Max(counts) != 0 {
			t.Errorf("message %s tried with x-delivery-count %v, want 0 every time: the refusal spent a delivery", id, slices.Compact(counts))
		}
	}
}
