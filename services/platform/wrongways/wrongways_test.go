package wrongways_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/services/platform/wrongways"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// sut is the system under test, as testenv's helpers see it: the platform's tests speak
// the example system's names.
var sut = testenv.System{Topology: testenv.ExampleTopology}

// twoQueues is testenv.ExampleTwoQueues: one event type bound to two queues.
var twoQueues = testenv.ExampleTwoQueues

// setup is a fresh database with the platform's tables, a fresh vhost with the exchanges
// declared, and telemetry that writes nowhere.
func setup(t *testing.T) (*pgxpool.Pool, string, *telemetry.Telemetry) {
	t.Helper()
	admin, dbURL := testenv.Database(t, "wrongways")
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
	amqpURL := testenv.VHost(t)
	testenv.Declare(t, amqpURL, sut.Topology.Subset())
	return pool, amqpURL, tel
}

// writeEvents writes n outbox rows of the example type, each of an aggregate of its own.
func writeEvents(t *testing.T, pool *pgxpool.Pool, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			if _, err := outbox.Write(ctx, tx, outbox.Event{
				Source: "bookstore/test", Type: testenv.ExampleType, AggregateType: "order",
				AggregateID: fmt.Sprintf("%s-%d", prefix, i), Sequence: 1, Data: map[string]int{"n": i},
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// run runs relay until the test ends.
func run(t *testing.T, relay wrongways.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// The right relay holds an event while one of the queues bound to its type is missing
// (outbox's TestAnEventWaitsUntilEveryQueueBoundToItsTypeExists). Given MandatoryAlone's
// topology, it publishes at once: the one queue there takes every event, the broker acks
// them and returns none, and the queue declared a moment later never gets them.
func TestARelayThatTrustsMandatoryAlonePublishesPastAMissingQueue(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	testenv.Declare(t, amqpURL, twoQueues.Subset("example.first"))
	const events = 4
	writeEvents(t, pool, "mandatory", events)
	conn := broker.NewConn(amqpURL, "relay")
	t.Cleanup(func() { conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, wrongways.MandatoryAlone(twoQueues), 10*time.Second), tel,
		outbox.Config{ID: "relay", MaxAttempts: 1, OutageMax: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, relay)
	testenv.Eventually(t, 10*time.Second, "every row published while example.second is missing", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published' AND attempts = 0") == events
	})
	testenv.Declare(t, amqpURL, twoQueues.Subset("example.second"))
	if got := sut.Drain(t, amqpURL, "example.first", 300*time.Millisecond); len(got) != events {
		t.Errorf("example.first received %d events, want %d", len(got), events)
	}
	if got := sut.Drain(t, amqpURL, "example.second", 300*time.Millisecond); len(got) != 0 {
		t.Errorf("example.second received %d events, want none: they were published before it existed", len(got))
	}
}

// viaProxy returns amqpURL with a proxy in between that the test can cut.
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

// holdMarks arms the failpoint name, between a relay's publish and its mark, to delay
// every batch by delay (a Go duration) until the test ends.
func holdMarks(t *testing.T, name, delay string) {
	t.Helper()
	names := []string{name}
	if err := failpoint.Configure(name+"=delay("+delay+")", names); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = failpoint.Configure("", names) })
}

// sharedIDRelay is a relay under the relay id "shared", publishing to url and passing the
// failpoint afterPublish between its publish and its mark, quick to retry and to poll.
func sharedIDRelay(t *testing.T, pool *pgxpool.Pool, tel *telemetry.Telemetry, url, afterPublish string) *outbox.Relay {
	t.Helper()
	conn := broker.NewConn(url, "twin")
	t.Cleanup(func() { conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, outbox.Config{
		ID: "shared", AfterPublishFailpoint: afterPublish, OutageMax: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// twinAfterPublish is the failpoint of the twin in the test below alone.
const twinAfterPublish = "twin/after-publish"

// A second process is started under a live relay's RELAY_ID, as in outbox's
// TestASecondProcessUnderALiveRelaysIDRelaysNothing, but run as RelayingTwin: it relays
// although the live one holds the id's lock, and says it is ready. The live one takes
// back the rows the twin has in flight (published, their mark held back by a delay) as a
// dead process's claims, and publishes them a second time.
func TestARelayingTwinPublishesTheRowsItHasInFlightTwice(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	testenv.Declare(t, amqpURL, sut.Topology)
	holdMarks(t, twinAfterPublish, "3s")
	newRelay := func(url, fp string) *outbox.Relay { return sharedIDRelay(t, pool, tel, url, fp) }
	// The live relay cannot reach the broker at first, so the twin is the one to claim
	// the rows.
	proxy, proxied := viaProxy(t, amqpURL)
	proxy.Cut()
	run(t, newRelay(proxied, ""))
	testenv.Eventually(t, 10*time.Second, "the live relay holds the relay id's lock", func() bool {
		return testenv.Count(t, pool, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			 WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`) == 1
	})
	twin := wrongways.RelayingTwin(newRelay(amqpURL, twinAfterPublish), "shared", pool, 20*time.Millisecond)
	run(t, twin)
	testenv.Eventually(t, 10*time.Second, "the twin ready to relay under the live relay's id", func() bool {
		return twin.Ready(context.Background()) == nil
	})

	const events = 3
	writeEvents(t, pool, "twin", events)
	testenv.Eventually(t, 10*time.Second, "the twin has claimed the rows", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE claimed_by IS NOT NULL") == events
	})
	proxy.Restore()
	testenv.Eventually(t, 15*time.Second, "every row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == events
	})
	if got := sut.Drain(t, amqpURL, testenv.ExampleQueue, 300*time.Millisecond); len(got) <= events {
		t.Errorf("%d events published as %d messages, want more: the twin's rows in flight were to be published again", events, len(got))
	}
}

// holderAfterPublish is the failpoint of the live relay in the test below alone.
const holderAfterPublish = "holder/after-publish"

// The mirror of the test above: the live relay has rows in flight (published, their
// mark held back by a delay) when a RelayingTwin starts under its id. The twin takes the
// live relay's claims for a dead predecessor's, as the lock's holder would, and
// publishes those rows a second time.
func TestARelayingTwinTakesTheLiveRelaysRowsInFlightAndPublishesThemTwice(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	testenv.Declare(t, amqpURL, sut.Topology)
	holdMarks(t, holderAfterPublish, "5s")
	newRelay := func(fp string) *outbox.Relay { return sharedIDRelay(t, pool, tel, amqpURL, fp) }
	run(t, newRelay(holderAfterPublish))
	testenv.Eventually(t, 10*time.Second, "the live relay holds the relay id's lock", func() bool {
		return testenv.Count(t, pool, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			 WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`) >= 1
	})
	const events = 3
	writeEvents(t, pool, "holder", events)
	testenv.Eventually(t, 10*time.Second, "the live relay has the rows in flight", func() bool {
		return testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue) == events &&
			testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending' AND claimed_until > now()") == events
	})
	twin := wrongways.RelayingTwin(newRelay(""), "shared", pool, 20*time.Millisecond)
	run(t, twin)
	testenv.Eventually(t, 10*time.Second, "every row published", func() bool {
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == events
	})
	if got := sut.Drain(t, amqpURL, testenv.ExampleQueue, 300*time.Millisecond); len(got) <= events {
		t.Errorf("%d events published as %d messages, want more: the live relay's rows in flight were to be published again by the twin", events, len(got))
	}
}

// The database refuses every message's work (a privilege revoked), as in consumer's
// TestAPrivilegeTheDatabaseRefusesPausesTheConsumerAndSpendsNoDelivery. Behind
// RefusalsAsFailures the consumer cannot tell the refusal from the message's own fault:
// it requeues each valid message until the queue's delivery limit dead-letters it.
func TestAConsumerThatTakesRefusalsForFailuresDeadLettersValidMessages(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE work (message_id uuid NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	ch := sut.Channel(t, amqpURL)
	handle := func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		processed, err := inbox.Process(ctx, pool, "test", env, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO work VALUES ($1)", env.UUID())
			return err
		})
		if err != nil || processed {
			return inbox.Processed, err
		}
		return inbox.Duplicate, nil
	}
	conn := broker.NewConn(amqpURL, "consumer-test")
	t.Cleanup(func() { conn.Close() })
	c, err := consumer.New(conn, tel, consumer.Config{
		Name: "test", Queue: testenv.ExampleQueue, Types: []string{testenv.ExampleType}, Topology: sut.Topology, Producer: testenv.Login(amqpURL),
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, Healthy: pool.Ping,
	}, wrongways.RefusalsAsFailures(handle))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 10*time.Second, "consumer consuming", func() bool { return c.Ready(ctx) == nil })

	if _, err := pool.Exec(ctx, "REVOKE INSERT ON inbox FROM CURRENT_USER"); err != nil {
		t.Fatal(err)
	}
	const n = 3
	for i := range n {
		env, err := event.New("example/source", testenv.ExampleType, fmt.Sprintf("refused-%d", i), 1, map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.PublishWithContext(ctx, sut.Topology.Exchange, testenv.ExampleType, true, false, amqp.Publishing{
			MessageId: env.ID, Type: env.Type, ContentType: event.ContentType, DeliveryMode: amqp.Persistent, UserId: testenv.Login(amqpURL), Body: body,
		}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "every valid message dead-lettered while the database refused its work", func() bool {
		return testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue+".dlq") == n
	})
	if err := c.Ready(ctx); err != nil {
		t.Errorf("Ready while the database refused the work = %v, want nil: the refusal is invisible to it", err)
	}
}
