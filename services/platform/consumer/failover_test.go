package consumer_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// A failover as a multi-host DATABASE_URL sees it: the primary (the first host, here a
// proxy) dies while a handler's statement is in flight, and the next host answers as the
// read-write server by the time the consumer asks whether its database is up. The lost
// connection is the database's failure, not the message's: the handler is tried again
// on the new primary within the same delivery, the message is processed once, and no
// delivery is spent on it.
func TestAPrimaryDyingMidStatementSpendsNoDeliveryWhenTheNextHostTakesOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	u, err := url.Parse(h.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	standby := u.Host
	primary := testenv.NewProxy(t, standby)
	u.Host = primary.Addr + "," + standby
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	h.db = testenv.Pool(t, u.String())

	var calls atomic.Int32
	inFlight := make(chan struct{})
	handle := func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		if calls.Add(1) == 1 {
			close(inFlight)
			// Long enough for the test to kill the primary under it.
			if _, err := h.db.Exec(ctx, "SELECT pg_sleep(30) /* failover victim */"); err != nil {
				return 0, err
			}
		}
		return h.handle(ctx, env)
	}

	tel := telemetryFor(t)
	metrics := httptest.NewServer(tel.Metrics)
	t.Cleanup(metrics.Close)
	conn := broker.NewConn(h.amqpURL, "consumer-test")
	c, err := consumer.New(conn, tel, consumer.Config{
		Name: "test", Queue: testenv.ExampleQueue, Types: []string{testenv.ExampleType}, Topology: sut.Topology, Producer: testenv.Login(h.amqpURL),
		Concurrency: 1, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Healthy: h.db.Ping,
	}, handle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })

	env, body := envelope(t, "failover-1", map[string]int{"n": 1})
	h.publish(t, env.ID, env.Type, body)
	<-inFlight
	testenv.Eventually(t, 10*time.Second, "the statement running on the primary", func() bool {
		return h.count(t, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%failover victim%' AND pid <> pg_backend_pid()") == 1
	})
	primary.Cut() // the primary dies: its connections drop and it answers no more

	testenv.Eventually(t, 30*time.Second, "the message processed on the new primary", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == 1
	})
	spent, _ := testenv.MetricOK(t, metrics.URL, "bookstore_consumer_transient_failures_total", `consumer="test"`)
	if spent != 0 {
		t.Errorf("%v deliveries spent on a message whose primary died under it, want 0", spent)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2: once on the dead primary, once on the new one", n)
	}
}
