package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// sut is the system under test, as testenv's helpers see it.
// The platform knows no system: its tests speak the example system's names.
var sut = testenv.System{Topology: testenv.ExampleTopology}

// harness runs a real consumer of the example queue in a fresh vhost, whose handler
// records each processed event in a table through the real inbox.
type harness struct {
	pool    *pgxpool.Pool // the test's own view of the database
	db      *pgxpool.Pool // the handler's: pool, unless the test puts a proxy in between
	amqpURL string
	ch      *amqp.Channel
	failing atomic.Int32 // the handler fails transiently this many more times

	callsMu sync.Mutex
	calls   map[string]int // handler calls per message id

	spans      *tracetest.InMemoryExporter // the spans of run's consumer: one per delivery it handled
	metricsURL string                      // run's consumer's /metrics
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "consumer")
	pool, err := pgdb.Open(ctx, admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE TABLE work (message_id uuid NOT NULL, subject text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	h := &harness{pool: pool, db: pool, amqpURL: testenv.VHost(t), calls: map[string]int{}}
	h.ch = sut.Channel(t, h.amqpURL)
	return h
}

func (h *harness) handle(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	h.callsMu.Lock()
	h.calls[env.ID]++
	h.callsMu.Unlock()
	if h.failing.Load() > 0 {
		h.failing.Add(-1)
		return 0, errors.New("database is down (simulated)")
	}
	processed, err := inbox.Process(ctx, h.db, "test", env, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO work VALUES ($1, $2)", env.UUID(), env.Subject)
		return err
	})
	if err != nil {
		return 0, err
	}
	if !processed {
		return inbox.Duplicate, nil
	}
	return inbox.Processed, nil
}

// run starts the consumer, with the harness's settings changed by tune, and stops it when
// the test ends.
func (h *harness) run(t *testing.T, tune ...func(*consumer.Config)) *consumer.Consumer {
	t.Helper()
	return h.runWith(t, h.handle, tune...)
}

// runWith is run with handle as the consumer's handler.
func (h *harness) runWith(t *testing.T, handle consumer.Handler, tune ...func(*consumer.Config)) *consumer.Consumer {
	t.Helper()
	h.spans = tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "test", Stdout: io.Discard, SpanExporter: h.spans})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tel.Metrics)
	t.Cleanup(srv.Close)
	h.metricsURL = srv.URL
	conn := broker.NewConn(h.amqpURL, "consumer-test")
	cfg := consumer.Config{
		Name: "test", Queue: testenv.ExampleQueue, Types: []string{testenv.ExampleType}, Topology: sut.Topology, Producer: testenv.Login(h.amqpURL),
		Concurrency: 2, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		Healthy: h.db.Ping,
	}
	for _, f := range tune {
		f(&cfg)
	}
	c, err := consumer.New(conn, tel, cfg, handle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return c
}

func telemetryFor(t *testing.T) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "test", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return tel
}

// deliveryCounts returns the x-delivery-count of each delivery of message id that the
// consumer handled, in order (0 for a first delivery): what the queue counted against its
// delivery limit by the time it handed the message over.
func (h *harness) deliveryCounts(id string) []int64 {
	var out []int64
	for _, s := range h.spans.GetSpans() {
		var msgID string
		count := int64(-1)
		for _, a := range s.Attributes {
			switch a.Key {
			case "messaging.message.id":
				msgID = a.Value.AsString()
			case "messaging.rabbitmq.delivery_count":
				count = a.Value.AsInt64()
			}
		}
		if msgID == id && count >= 0 {
			out = append(out, count)
		}
	}
	return out
}

// callsOf returns how often the handler was called for message id.
func (h *harness) callsOf(id string) int {
	h.callsMu.Lock()
	defer h.callsMu.Unlock()
	return h.calls[id]
}

func (h *harness) publish(t *testing.T, id, typ string, body []byte) {
	t.Helper()
	err := h.ch.PublishWithContext(context.Background(), sut.Topology.Exchange, testenv.ExampleType, true, false,
		amqp.Publishing{MessageId: id, Type: typ, ContentType: event.ContentType, DeliveryMode: amqp.Persistent, UserId: testenv.Login(h.amqpURL), Body: body})
	if err != nil {
		t.Fatal(err)
	}
}

func envelope(t *testing.T, subject string, data any) (event.Envelope, []byte) {
	t.Helper()
	env, err := event.New("example/source", testenv.ExampleType, subject, 1, data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return env, b
}

func (h *harness) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Every kind of poison lands in the DLQ at its first delivery, and the valid messages
// behind it are processed.
func TestPoisonGoesToTheDLQAndTheQueueMovesOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.run(t)

	first, firstBody := envelope(t, "order-1", map[string]int{"n": 1})
	h.publish(t, first.ID, first.Type, firstBody)
	testenv.Eventually(t, 10*time.Second, "first valid message processed", func() bool { return h.count(t, "SELECT count(*) FROM work") == 1 })

	reused := first
	reused.Data = json.RawMessage(`{"n":2}`)
	reusedBody, _ := json.Marshal(reused)
	v2 := first
	v2.ID, v2.Type = "018f2b1e-0000-7000-8000-0000000000b2", "example.thing-happened.v2"
	v2Body, _ := json.Marshal(v2)
	poison := map[string][]byte{
		event.ReasonNotJSON:         []byte("not json at all"),
		event.ReasonInvalidEnvelope: []byte(`{"specversion":"1.0","id":"nope"}`),
		event.ReasonUnknownType:     v2Body,
		event.ReasonContentMismatch: reusedBody,
	}
	for _, body := range poison {
		h.publish(t, "", testenv.ExampleType, body)
	}
	last, lastBody := envelope(t, "order-2", map[string]int{"n": 3})
	h.publish(t, last.ID, last.Type, lastBody)

	testenv.Eventually(t, 10*time.Second, "valid message behind the poison processed", func() bool { return h.count(t, "SELECT count(*) FROM work") == 2 })
	testenv.Eventually(t, 10*time.Second, "every poison message in the DLQ", func() bool {
		return testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq") == len(poison)
	})
	dead := map[string]bool{}
	for range poison {
		d, ok, err := h.ch.Get(testenv.ExampleQueue+".dlq", true)
		if err != nil || !ok {
			t.Fatalf("get from DLQ: %v %v", ok, err)
		}
		dead[string(d.Body)] = true
	}
	notRedelivered(t, h.metricsURL)
	for reason, body := range poison {
		if !dead[string(body)] {
			t.Errorf("%s poison not in the DLQ", reason)
		}
	}
}

// deliveryCount is d's x-delivery-count: how often its queue has delivered it before,
// as far as the broker counts (0 on a first delivery, where the header is absent).
func deliveryCount(d amqp.Delivery) int64 {
	if v, ok := d.Headers["x-delivery-count"].(int64); ok {
		return v
	}
	return 0
}

// A duplicate is a success: acked, not dead-lettered, not processed twice.
func TestDuplicateIsAckedOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.run(t)
	env, body := envelope(t, "order-1", map[string]int{"n": 1})
	for range 3 {
		h.publish(t, env.ID, env.Type, body)
	}
	marker, markerBody := envelope(t, "order-2", map[string]int{"n": 2})
	h.publish(t, marker.ID, marker.Type, markerBody)
	testenv.Eventually(t, 10*time.Second, "both events processed", func() bool { return h.count(t, "SELECT count(*) FROM work") == 2 })
	time.Sleep(200 * time.Millisecond)
	if n := h.count(t, "SELECT count(*) FROM work"); n != 2 {
		t.Errorf("work rows = %d, want 2", n)
	}
	if n := testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq"); n != 0 {
		t.Errorf("DLQ has %d messages, want 0", n)
	}
	if n := testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue); n != 0 {
		t.Errorf("queue still has %d messages", n)
	}
}

// A transient failure is requeued after a backoff and succeeds later.
func TestTransientFailureIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.failing.Store(3)
	h.run(t)
	env, body := envelope(t, "order-1", map[string]int{"n": 1})
	h.publish(t, env.ID, env.Type, body)
	testenv.Eventually(t, 10*time.Second, "processed after three failures", func() bool { return h.count(t, "SELECT count(*) FROM work") == 1 })
	if n := h.failing.Load(); n != 0 {
		t.Errorf("handler still has %d failures to give: it was not retried", n)
	}
}

// Fifty copies of one message claimed at the same moment: the primary key lets exactly one
// through, and the others wait for it, then skip.
func TestInboxLetsOneOfFiftyConcurrentCopiesThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	env, _ := envelope(t, "order-1", map[string]int{"n": 1})
	var wg sync.WaitGroup
	var processed, duplicates atomic.Int32
	start := make(chan struct{})
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := h.handle(context.Background(), env)
			if err != nil {
				t.Error(err)
			}
			switch out {
			case inbox.Processed:
				processed.Add(1)
			case inbox.Duplicate:
				duplicates.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if processed.Load() != 1 || duplicates.Load() != 49 {
		t.Errorf("processed %d, duplicates %d; want 1 and 49", processed.Load(), duplicates.Load())
	}
	if n := h.count(t, "SELECT count(*) FROM work"); n != 1 {
		t.Errorf("work rows = %d, want 1", n)
	}
}

// A statement the database cancels at its statement timeout is retried in place, like a
// deadlock: the transaction it cut was rolled back whole and the same work may finish
// on the next try, so it spends none of the message's deliveries.
func TestAStatementCutAtTheStatementTimeoutIsRetriedInPlaceWithoutADelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var cut atomic.Int32
	cut.Store(2)
	h.runWith(t, func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		h.callsMu.Lock()
		h.calls[env.ID]++
		h.callsMu.Unlock()
		processed, err := inbox.Process(ctx, h.db, "test", env, func(tx pgx.Tx) error {
			if cut.Add(-1) >= 0 {
				if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 50"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "SELECT pg_sleep(5)")
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO work VALUES ($1, $2)", env.UUID(), env.Subject)
			return err
		})
		if err != nil || !processed {
			return inbox.Duplicate, err
		}
		return inbox.Processed, nil
	})
	env, body := envelope(t, "order-1", map[string]int{"n": 1})
	h.publish(t, env.ID, env.Type, body)
	testenv.Eventually(t, 10*time.Second, "processed after two statements cut at the timeout", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == 1
	})
	if calls := h.callsOf(env.ID); calls != 3 {
		t.Errorf("the handler was called %d times, want 3", calls)
	}
	// A delivery's span ends after its ack, a moment after the work committed; a
	// delivery returned to the queue would have ended before the one that did the work.
	testenv.Eventually(t, 10*time.Second, "the delivery that did the work settled", func() bool {
		return len(h.deliveryCounts(env.ID)) > 0
	})
	if deliveries := len(h.deliveryCounts(env.ID)); deliveries != 1 {
		t.Errorf("the message was delivered %d times, want once: a statement timeout is not the message's failure", deliveries)
	}
}
