package consumer_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/testenv/cluster"
)

// consumerTimeout is the broker's consumer timeout in the tests of this file.
const consumerTimeout = 2 * time.Second

// timeoutVHost returns the AMQP URL of a fresh vhost whose example queue has a consumer
// timeout of consumerTimeout. RabbitMQ
// 3.12 and later take it per queue: a policy (consumer-timeout) on the queue, in the
// tests' broker. RabbitMQ 3.10 has only the node-wide consumer_timeout, checked on each
// channel's tick (channel_tick_interval, 60 s by default): the test boots a node of its
// own with both set, and leaves the machine's broker alone.
func timeoutVHost(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ms := strconv.Itoa(int(consumerTimeout / time.Millisecond))
	if testenv.RabbitMQ(t).AtLeast(3, 12) {
		amqpURL := testenv.VHost(t)
		u, err := url.Parse(amqpURL)
		if err != nil {
			t.Fatal(err)
		}
		vhost := strings.TrimPrefix(u.Path, "/")
		m := broker.Management{URL: testenv.ManagementURL()}
		policy := `{"pattern":"^` + testenv.ExampleQueue + `$","apply-to":"queues","definition":{"consumer-timeout":` + ms + `}}`
		if err := m.Do(ctx, http.MethodPut, "/api/policies/"+url.PathEscape(vhost)+"/consumer-timeout", policy, nil); err != nil {
			t.Fatalf("consumer-timeout policy: %v", err)
		}
		return amqpURL
	}
	if err := cluster.RabbitMQAvailable(); err != nil {
		testenv.Unavailable(t, "a RabbitMQ node of the test's own (its consumer_timeout is node-wide)", err)
	}
	r, err := cluster.StartRabbitMQ(ctx, "", 1,
		cluster.Setting{Key: "consumer_timeout", Value: ms},
		cluster.Setting{Key: "channel_tick_interval", Value: "500"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	const vhost = "consumer-timeout"
	if err := (broker.Management{URL: r.ManagementURL()}).CreateVHost(ctx, vhost, "admin"); err != nil {
		t.Fatal(err)
	}
	return r.URL("admin", "admin", vhost)
}

// A handler is held past the broker's consumer timeout inside its transaction, its
// inbox row written and not committed. The broker takes the delivery back (RabbitMQ 3.10
// closes the consumer's channel with PRECONDITION_FAILED, 4.3 cancels the consumer) and
// hands the message at once to a second consumer of the queue, as to another process of
// the service. The copy's inbox claim waits on the first transaction's uncommitted row;
// when the held handler commits, the copy finds a duplicate and is acked. The work is
// done once, nothing is lost or dead-lettered, the messages published meanwhile are
// processed, and the held consumer consumes again within seconds of its handler's end.
func TestAHandlerHeldPastTheConsumerTimeoutDoesItsWorkOnceAndItsConsumerResumes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.amqpURL = timeoutVHost(t)
	h.ch = sut.Channel(t, h.amqpURL)
	version := testenv.RabbitMQ(t)

	heldEnv, heldBody := envelope(t, "held", map[string]string{"n": "held"})
	claimed := make(chan struct{})    // the held handler has written its inbox row
	release := make(chan struct{})    // the held handler may commit
	var holding atomic.Bool           // the first call for the held message is under way
	var heldErr atomic.Pointer[error] // what the held handler's transaction returned
	handle := func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		if env.ID != heldEnv.ID || !holding.CompareAndSwap(false, true) {
			return h.handle(ctx, env)
		}
		h.callsMu.Lock()
		h.calls[env.ID]++
		h.callsMu.Unlock()
		processed, err := inbox.Process(ctx, h.db, "test", env, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO work VALUES ($1, $2)", env.UUID(), env.Subject); err != nil {
				return err
			}
			close(claimed)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		heldErr.Store(&err)
		if err != nil || !processed {
			return 0, errors.Join(err, errors.New("the held copy was not the first"))
		}
		return inbox.Processed, nil
	}
	tune := func(cfg *consumer.Config) { cfg.HandlerTimeout = 60 * time.Second }
	consumers := []*consumer.Consumer{h.runWith(t, handle, tune)}
	metrics := []string{h.metricsURL}
	consumers = append(consumers, h.runWith(t, handle, tune))
	metrics = append(metrics, h.metricsURL)
	for _, c := range consumers {
		testenv.Eventually(t, 20*time.Second, "both consumers consuming", func() bool { return c.Ready(context.Background()) == nil })
	}

	h.publish(t, heldEnv.ID, heldEnv.Type, heldBody)
	select {
	case <-claimed:
	case <-time.After(20 * time.Second):
		t.Fatal("the held handler did not write its inbox row")
	}
	heldAt := time.Now()

	// The broker takes the delivery back: one consumer says why it no longer consumes.
	var held *consumer.Consumer
	var why error
	testenv.Eventually(t, consumerTimeout+20*time.Second, "the broker taking the held delivery back", func() bool {
		for _, c := range consumers {
			if err := c.Ready(context.Background()); err != nil {
				held, why = c, err
				return true
			}
		}
		return false
	})
	timedOut := time.Now()
	t.Logf("RabbitMQ %s took the delivery back %.1fs after the handler was held: %v", version, timedOut.Sub(heldAt).Seconds(), why)

	// The copy reaches the other consumer at once, and its claim waits on the held row.
	testenv.Eventually(t, 20*time.Second, "the copy's inbox claim waiting on the held transaction", func() bool {
		return h.callsOf(heldEnv.ID) == 2 && h.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%inbox%'`) == 1
	})
	copyAt := time.Now()
	t.Logf("the copy was delivered and waits on its claim %.1fs after the broker took the delivery back", copyAt.Sub(timedOut).Seconds())

	// Messages published while the handler is held are processed by the free workers.
	const n = 5
	ids := []string{heldEnv.ID}
	for i := range n {
		env, body := envelope(t, "meanwhile-"+strconv.Itoa(i), map[string]int{"n": i})
		ids = append(ids, env.ID)
		h.publish(t, env.ID, env.Type, body)
	}
	testenv.Eventually(t, 20*time.Second, "the messages published meanwhile processed", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == n
	})

	close(release)
	released := time.Now()
	testenv.Eventually(t, 30*time.Second, "the held consumer consuming again", func() bool { return held.Ready(context.Background()) == nil })
	resumed := time.Since(released)
	if err := *heldErr.Load(); err != nil {
		t.Fatalf("the held handler's transaction: %v", err)
	}

	// One more message after the release, processed as any other.
	env, body := envelope(t, "after", map[string]int{"n": n})
	ids = append(ids, env.ID)
	h.publish(t, env.ID, env.Type, body)
	testenv.Eventually(t, 20*time.Second, "every message processed and the queue empty", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == len(ids) && testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue) == 0
	})
	drained := time.Since(released)
	t.Logf("RabbitMQ %s: the held consumer consumed again %.2fs after its handler was released; every message processed %.2fs after it",
		version, resumed.Seconds(), drained.Seconds())

	for _, id := range ids {
		if got := h.count(t, "SELECT count(*) FROM work WHERE message_id = '"+id+"'"); got != 1 {
			t.Errorf("message %s done %d times, want once", id, got)
		}
	}
	// The copy was acked as a duplicate: nothing of it is left in the queue or the DLQ.
	var duplicates float64
	for _, m := range metrics {
		duplicates += testenv.Metric(t, m, "bookstore_consumer_duplicates_total", `consumer="test"`)
	}
	if duplicates < 1 {
		t.Errorf("%v duplicates counted, want the copy of the held message among them", duplicates)
	}
	if got := testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq"); got != 0 {
		t.Errorf("%d messages dead-lettered, want none", got)
	}
	if resumed > 10*time.Second {
		t.Errorf("the held consumer consumed again %v after its handler's end, want within seconds", resumed)
	}
}
