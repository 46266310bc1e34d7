package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// twoQueues is testenv.ExampleTwoQueues: one event type bound to two queues.
var twoQueues = testenv.ExampleTwoQueues

// runRelay runs relay until the test ends.
func runRelay(t *testing.T, relay *outbox.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// One consumer has declared its queue and the other not yet (a first deployment, a
// consumer that starts late, a queue deleted and not declared again). The broker would
// route the event to the one queue and ack it, and `mandatory` returns only a message
// that reaches no queue at all, so the relay checks the topology itself: the events
// wait, no attempt spent, readiness names the missing queue, and once the queue exists
// both consumers get every event.
func TestAnEventWaitsUntilEveryQueueBoundToItsTypeExists(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	testenv.Declare(t, amqpURL, twoQueues.Subset("example.first"))
	const events = 4
	writeEvents(t, pool, testenv.ExampleType, "bound", events, 1)
	conn := broker.NewConn(amqpURL, "relay")
	t.Cleanup(func() { conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, twoQueues, 10*time.Second), tel,
		outbox.Config{ID: "relay", MaxAttempts: 1, OutageMax: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	testenv.Eventually(t, 10*time.Second, "the relay holds the events, or has published them", func() bool {
		return errors.Is(relay.Ready(context.Background()), broker.ErrMissingQueue) ||
			testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") > 0
	})
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending' AND attempts = 0"); n != events {
		t.Fatalf("%d of %d rows pending with no attempt spent while a queue was missing: the others would never reach its consumer", n, events)
	}
	if err := relay.Ready(context.Background()); !strings.Contains(fmt.Sprint(err), "example.second") {
		t.Errorf("Ready = %v, want the missing queue named", err)
	}

	testenv.Declare(t, amqpURL, twoQueues.Subset("example.second"))
	testenv.Eventually(t, 10*time.Second, "every row published once both queues exist", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published' AND attempts = 0") == events
	})
	for _, q := range []string{"example.first", "example.second"} {
		if got := sut.Drain(t, amqpURL, q, 300*time.Millisecond); len(got) != events {
			t.Errorf("%s received %d events, want %d", q, len(got), events)
		}
	}
	if err := relay.Ready(context.Background()); err != nil {
		t.Errorf("Ready after the queue came = %v", err)
	}
}

// A consumer killed between declaring its queue and binding it leaves the queue there
// with no binding until it starts again. A relay that has never seen the queue missing
// (a fresh process) would publish at once: the broker routes each event to the other
// queue alone and acks it, and the unbound queue's consumer never gets it. The publisher
// makes the bindings it relies on before each batch, so both queues get every event.
func TestAnEventReachesAQueueThatExistsButWasLeftUnbound(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	testenv.Declare(t, amqpURL, twoQueues.Subset("example.first"))
	// example.second as its consumer leaves it when killed after its queue.declare and
	// before its queue.bind: dead-letter queue and queue there, the event type unbound.
	second := twoQueues.Subset("example.second")
	second.Queues[0].Bindings = nil
	testenv.Declare(t, amqpURL, second)
	const events = 4
	writeEvents(t, pool, testenv.ExampleType, "unbound", events, 1)
	conn := broker.NewConn(amqpURL, "relay")
	t.Cleanup(func() { conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, twoQueues, 10*time.Second), tel,
		outbox.Config{ID: "relay", MaxAttempts: 1, OutageMax: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	testenv.Eventually(t, 10*time.Second, "every row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == events
	})
	for _, q := range []string{"example.first", "example.second"} {
		if got := sut.Drain(t, amqpURL, q, 300*time.Millisecond); len(got) != events {
			t.Errorf("%s received %d events, want %d", q, len(got), events)
		}
	}
}

// twinAfterPublish is the failpoint of the twin in the test below alone.
const twinAfterPublish = "twin/after-publish"

// A second process is started under a live relay's RELAY_ID by mistake. The live one
// holds the id's lock and so takes back every claim made under the id at once; were the
// twin to relay too, the holder would take back the rows the twin has in flight
// (published, not yet marked) and publish them a second time. The twin refuses instead,
// and says so in its readiness, and every event is published once.
func TestASecondProcessUnderALiveRelaysIDRelaysNothing(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	testenv.Declare(t, amqpURL, sut.Topology)
	names := []string{twinAfterPublish}
	if err := failpoint.Configure(twinAfterPublish+"=delay(3s)", names); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = failpoint.Configure("", names) })
	newRelay := func(url, fp string) *outbox.Relay {
		conn := broker.NewConn(url, "twin")
		t.Cleanup(func() { conn.Close() })
		relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, outbox.Config{
			ID: "shared", AfterPublishFailpoint: fp, OutageMax: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return relay
	}
	// The live relay cannot reach the broker at first, so the twin would be the one to
	// claim the rows.
	proxy, proxied := viaProxy(t, amqpURL)
	proxy.Cut()
	holder := newRelay(proxied, "")
	runRelay(t, holder)
	testenv.Eventually(t, 10*time.Second, "the live relay holds the relay id's lock", func() bool {
		return testenv.Count(t, pool, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			 WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`) == 1
	})
	twin := newRelay(amqpURL, twinAfterPublish)
	runRelay(t, twin)

	const events = 3
	writeEvents(t, pool, testenv.ExampleType, "twin", events, 1)
	testenv.Eventually(t, 10*time.Second, "the twin has claimed the rows, or refuses to", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE claimed_by IS NOT NULL") == events ||
			errors.Is(twin.Ready(context.Background()), outbox.ErrTwin)
	})
	proxy.Restore()
	testenv.Eventually(t, 15*time.Second, "every row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == events
	})
	if got := sut.Drain(t, amqpURL, testenv.ExampleQueue, 300*time.Millisecond); len(got) != events {
		t.Errorf("%d events published as %d messages: the twin's rows in flight were published again", events, len(got))
	}
	if err := twin.Ready(context.Background()); !errors.Is(err, outbox.ErrTwin) {
		t.Errorf("the twin's Ready = %v, want ErrTwin", err)
	}
}

// Someone deletes the exchange under a running relay. The relay binds its queues before
// each batch, and the bind fails with NOT_FOUND: for the missing exchange, not for the
// queue, which exists. The relay must tell the two apart, declare the exchange again and
// publish, and say meanwhile that the exchange is missing, not a queue.
func TestARelayDeclaresADeletedExchangeAgainAndNamesIt(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	conn := broker.NewConn(amqpURL, "relay")
	t.Cleanup(func() { conn.Close() })
	// A backoff long enough for every failed batch's error to be seen in Ready.
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel,
		outbox.Config{ID: "relay", BackoffBase: 500 * time.Millisecond, OutageMax: time.Second, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	writeEvents(t, pool, testenv.ExampleType, "before", 1, 1)
	testenv.Eventually(t, 10*time.Second, "the event before the deletion published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})

	ch := sut.Channel(t, amqpURL) // declares the topology, then deletes its exchange
	if err := ch.ExchangeDelete(sut.Topology.Exchange, false, false); err != nil {
		t.Fatal(err)
	}
	// The relay declares the exchange again within milliseconds, and Ready is polled; so
	// the exchange is deleted again whenever it is back until Ready has been seen naming
	// it, and only then left to the relay.
	seenOnce := make(chan struct{})
	deleter := make(chan struct{})
	go func() {
		defer close(deleter)
		for {
			select {
			case <-seenOnce:
				return
			case <-time.After(5 * time.Millisecond):
				if err := ch.ExchangeDelete(sut.Topology.Exchange, false, false); err != nil {
					return // a channel the broker closed: the relay is left to recover
				}
			}
		}
	}()
	const events = 3
	writeEvents(t, pool, testenv.ExampleType, "after", events, 1)
	var seen []string
	deadline := time.Now().Add(10 * time.Second)
	for testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") < 1+events {
		if err := relay.Ready(context.Background()); err != nil && !slices.Contains(seen, err.Error()) {
			if len(seen) == 0 {
				close(seenOnce)
				<-deleter
			}
			seen = append(seen, err.Error())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the events written after the exchange was deleted are still pending after 10 s; Ready said %q", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(seen) == 0 {
		close(seenOnce)
		<-deleter
		t.Fatal("Ready never reported the missing exchange")
	}
	for _, s := range seen {
		if !strings.Contains(s, "exchange "+sut.Topology.Exchange) || strings.Contains(s, "queue "+testenv.ExampleQueue) {
			t.Errorf("Ready = %q while the exchange was missing, want the exchange named and no queue blamed", s)
		}
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE attempts > 0"); n > 0 {
		t.Errorf("%d rows spent an attempt on the missing exchange", n)
	}
	if got := sut.Drain(t, amqpURL, testenv.ExampleQueue, 300*time.Millisecond); len(got) != 1+events {
		t.Errorf("the queue received %d events, want %d", len(got), 1+events)
	}
}
