package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/testenv"
)

// The tests of this file run the real notification and emailprovider binaries as OS
// processes, each with its own database, against one fresh RabbitMQ vhost per test, and
// play inventory by publishing stock events into it.

// The helpers of testenv declare and publish to the system's topology.
func TestMain(m *testing.M) {
	testenv.Topology = contracts.Topology
	testenv.Main(m)
}

// world is one test's databases, vhost and addresses. The provider's address is fixed
// for the test, so it can be started late or restarted where notification expects it.
type world struct {
	amqpURL                         string
	notificationAdmin, notification string
	providerAdmin, provider         string
	providerAddr                    string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{amqpURL: testenv.VHost(t), providerAddr: testenv.FreeAddr(t)}
	w.notificationAdmin, w.notification = testenv.Database(t, "notification")
	w.providerAdmin, w.provider = testenv.Database(t, "emailprovider")
	return w
}

func (w *world) startProvider(t *testing.T, extra ...string) *testenv.Process {
	t.Helper()
	bin := testenv.Build(t, "github.com/bookstore-go/bookstore/services/emailprovider/cmd/emailprovider")
	return testenv.StartProcess(t, bin, nil, withExtra(map[string]string{
		"HTTP_ADDR":          w.providerAddr,
		"LOG_LEVEL":          "debug", // its request log, a debug line, shows the trace it was called in
		"DATABASE_URL":       w.provider,
		"DATABASE_ADMIN_URL": w.providerAdmin,
	}, extra))
}

func (w *world) startNotification(t *testing.T, extra ...string) *testenv.Process {
	t.Helper()
	return testenv.StartProcess(t, testenv.Build(t, "."), nil, withExtra(map[string]string{
		"LOG_LEVEL":          "info",
		"DATABASE_URL":       w.notification,
		"DATABASE_ADMIN_URL": w.notificationAdmin,
		"AMQP_URL":           w.amqpURL,
		"EMAILPROVIDER_URL":  "http://" + w.providerAddr,
		"PROVIDER_TIMEOUT":   "1s",
	}, extra))
}

func withExtra(m map[string]string, extra []string) map[string]string {
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// stockEvent builds the event inventory would publish for an order's outcome.
func stockEvent(t *testing.T, typ string, orderID uuid.UUID, to string) event.Envelope {
	t.Helper()
	lines := []contracts.Line{{BookID: uuid.MustParse("018f2b1e-0000-7000-8000-000000000001"), Quantity: 2}}
	var data any = contracts.StockReservedData{OrderID: orderID, CustomerEmail: to, Lines: lines}
	if typ == contracts.StockRejected {
		data = contracts.StockRejectedData{OrderID: orderID, CustomerEmail: to, Lines: lines, Reason: "insufficient stock"}
	}
	env, err := event.New("bookstore/inventory", typ, orderID.String(), 2, data)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// publish publishes events as inventory's relay does: persistent, with confirms (again
// when the broker nacks), the AMQP properties of the contracts, and the trace context in
// the envelope and the headers.
func publish(t *testing.T, amqpURL, traceparent string, envs ...event.Envelope) {
	t.Helper()
	msgs := make([]broker.Message, len(envs))
	for i, env := range envs {
		env.TraceParent = traceparent
		msg, err := broker.EventMessage(env, "inventory")
		if err != nil {
			t.Fatal(err)
		}
		if traceparent != "" {
			msg.Publishing.Headers = amqp.Table{"traceparent": traceparent}
		}
		msgs[i] = msg
	}
	testenv.Publish(t, amqpURL, msgs...)
}

type record struct {
	OrderID        uuid.UUID `json:"order_id"`
	Kind           string    `json:"kind"`
	Status         string    `json:"status"`
	IdempotencyKey string    `json:"idempotency_key"`
	Attempts       int       `json:"attempts"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func getJSON(t *testing.T, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", u, err, b)
		}
	}
	return resp.StatusCode
}

func records(t *testing.T, n *testenv.Process, orderID uuid.UUID) []record {
	t.Helper()
	var out []record
	if status := getJSON(t, n.Base+"/notifications?order_id="+orderID.String(), &out); status != http.StatusOK {
		t.Fatalf("GET /notifications: %d", status)
	}
	return out
}

// waitStatus waits until the order's only record has the status and returns it.
func waitStatus(t *testing.T, n *testenv.Process, orderID uuid.UUID, status string, timeout time.Duration) record {
	t.Helper()
	var last []record
	testenv.Eventually(t, timeout, fmt.Sprintf("order %s's record to be %s (last seen %+v)", orderID, status, &last), func() bool {
		last = records(t, n, orderID)
		return len(last) == 1 && last[0].Status == status
	})
	return last[0]
}

type email struct {
	IdempotencyKey string `json:"idempotency_key"`
	To             string `json:"to"`
	Subject        string `json:"subject"`
	Deliveries     int    `json:"deliveries"`
}

func emails(t *testing.T, p *testenv.Process, to string) []email {
	t.Helper()
	var out []email
	if status := getJSON(t, p.Base+"/v1/emails?to="+url.QueryEscape(to), &out); status != http.StatusOK {
		t.Fatalf("GET /v1/emails: %d", status)
	}
	return out
}

// wantOneEmail asserts the provider holds exactly one email for the address, under the
// order's key for kind, delivered exactly once.
func wantOneEmail(t *testing.T, p *testenv.Process, to string, orderID uuid.UUID, kind string) {
	t.Helper()
	list := emails(t, p, to)
	want := "order/" + orderID.String() + "/" + kind
	if len(list) != 1 || list[0].IdempotencyKey != want || list[0].Deliveries != 1 {
		t.Fatalf("provider holds %+v for %s, want one email %s with deliveries 1", list, to, want)
	}
}

func setFaults(t *testing.T, p *testenv.Process, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, p.Base+"/admin/faults", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT /admin/faults: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /admin/faults %s: %d", body, resp.StatusCode)
	}
}

// The same event delivered twice, and the same outcome published again under a new
// message id (a producer duplicate): one record, one email. The provider call also
// carries the trace the event arrived with.
func TestOneEmailPerOrderOutcome(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	n := w.startNotification(t)

	confirmed, rejected := uuid.New(), uuid.New()
	first := stockEvent(t, contracts.StockReserved, confirmed, "ada@example.com")
	again := stockEvent(t, contracts.StockReserved, confirmed, "ada@example.com") // new message id
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	publish(t, w.amqpURL, "00-"+traceID+"-00f067aa0ba902b7-01",
		first, first, again, stockEvent(t, contracts.StockRejected, rejected, "bob@example.com"))

	rec := waitStatus(t, n, confirmed, "completed", 60*time.Second)
	if rec.Kind != "order-confirmed" || rec.IdempotencyKey != "order/"+confirmed.String()+"/order-confirmed" {
		t.Fatalf("record %+v", rec)
	}
	if rec2 := waitStatus(t, n, rejected, "completed", 60*time.Second); rec2.Kind != "order-rejected" {
		t.Fatalf("record %+v, want kind order-rejected", rec2)
	}
	// Every message was acked: two processed, two duplicates.
	testenv.Eventually(t, 60*time.Second, "all four messages to be handled", func() bool {
		return testenv.Metric(t, n.Base, "bookstore_consumer_processed_total") == 2 && testenv.Metric(t, n.Base, "bookstore_consumer_duplicates_total") == 2
	})
	wantOneEmail(t, p, "ada@example.com", confirmed, "order-confirmed")
	wantOneEmail(t, p, "bob@example.com", rejected, "order-rejected")
	if got := testenv.Metric(t, p.Base, "bookstore_emailprovider_sent_total"); got != 2 {
		t.Fatalf("provider sent %v emails, want 2", got)
	}
	if depth := testenv.QueueDepth(t, w.amqpURL, contracts.QueueNotificationStockEvents+".dlq"); depth != 0 {
		t.Fatalf("DLQ holds %d messages", depth)
	}

	// One trace from the event to the provider: the provider's request log carries the
	// trace id the event was published with.
	if !strings.Contains(p.Log(), `"trace_id":"`+traceID+`"`) {
		t.Fatalf("the provider never saw trace %s:\n%s", traceID, p.Log())
	}

	// The API: 400 for a missing or malformed order_id, [] for an order with no email.
	if status := getJSON(t, n.Base+"/notifications", nil); status != http.StatusBadRequest {
		t.Fatalf("GET /notifications without order_id: %d", status)
	}
	if status := getJSON(t, n.Base+"/notifications?order_id=42", nil); status != http.StatusBadRequest {
		t.Fatalf("GET /notifications?order_id=42: %d", status)
	}
	if got := records(t, n, uuid.New()); len(got) != 0 {
		t.Fatalf("records of an unknown order: %+v", got)
	}
}

// The process dies after the provider accepted the email and before the record is
// completed. The redelivered message finds 'processing', asks the provider, finds the
// email and completes the record without sending it again.
func TestCrashAfterSendSendsOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	n := w.startNotification(t, "BOOKSTORE_FAILPOINTS", "notification/after-send=crash")

	orderID := uuid.New()
	publish(t, w.amqpURL, "", stockEvent(t, contracts.StockReserved, orderID, "crash@example.com"))
	n.WaitKilled(t)

	// The window, seen from outside: sent, but the record says processing.
	wantOneEmail(t, p, "crash@example.com", orderID, "order-confirmed")
	var status string
	db := connect(t, w.notification)
	if err := db.QueryRow(context.Background(), "SELECT status FROM notifications WHERE order_id = $1", orderID).Scan(&status); err != nil || status != "processing" {
		t.Fatalf("record after the crash: %q %v, want processing", status, err)
	}

	restarted := w.startNotification(t)
	rec := waitStatus(t, restarted, orderID, "completed", 60*time.Second)
	if rec.Attempts < 2 {
		t.Fatalf("record %+v, want completed by a later attempt than the crashed one", rec)
	}
	wantOneEmail(t, p, "crash@example.com", orderID, "order-confirmed")
	if got := testenv.Metric(t, restarted.Base, "bookstore_notification_reconciled_total", `outcome="found"`); got != 1 {
		t.Fatalf("reconciled found = %v, want 1", got)
	}
	if got := testenv.Metric(t, p.Base, "bookstore_emailprovider_sent_total"); got != 1 {
		t.Fatalf("the provider sent %v emails, want 1 (before the crash, none after)", got)
	}
}

// Events that wait in the queue together are handled as a batch: phase one for all in one
// transaction, the sends at once. Each order still gets exactly one email, and a copy of
// an event inside the batch sends the batch down the one-at-a-time path, which finds it a
// duplicate.
func TestEventsWaitingTogetherAreEmailedAsABatchOnceEach(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	if err := contracts.Topology.Declare(testenv.Channel(t, w.amqpURL)); err != nil {
		t.Fatal(err)
	}
	const orders = 40
	ids := make([]uuid.UUID, orders)
	envs := make([]event.Envelope, 0, orders+1)
	for i := range ids {
		ids[i] = uuid.New()
		envs = append(envs, stockEvent(t, contracts.StockReserved, ids[i], fmt.Sprintf("batch%d@example.com", i)))
	}
	publish(t, w.amqpURL, "", append(envs, envs[orders-1])...) // the last one twice
	// One worker: while it handles the first event alone, the rest arrive and wait for it
	// as batches.
	n := w.startNotification(t, "CONSUMER_CONCURRENCY", "1")

	for i, id := range ids {
		waitStatus(t, n, id, "completed", 60*time.Second)
		wantOneEmail(t, p, fmt.Sprintf("batch%d@example.com", i), id, "order-confirmed")
	}
	testenv.Eventually(t, 60*time.Second, "every message acked", func() bool {
		return testenv.Metric(t, n.Base, "bookstore_consumer_processed_total")+testenv.Metric(t, n.Base, "bookstore_consumer_duplicates_total") == orders+1
	})
	if got := testenv.Metric(t, p.Base, "bookstore_emailprovider_sent_total"); got != orders {
		t.Fatalf("the provider sent %v emails, want %d", got, orders)
	}
	if got := testenv.Metric(t, n.Base, "bookstore_consumer_batch_size_count"); got == 0 {
		t.Fatal("no batch was handled: the events went one at a time")
	}
}

// The provider sends and then stalls past notification's timeout: the caller cannot know.
// The retry reconciles, finds the email, and there is still exactly one delivery.
func TestAmbiguousProviderTimeoutIsReconciled(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t, "EMAILPROVIDER_ADMIN", "1", "EMAILPROVIDER_AMBIGUOUS_RATE", "1")
	n := w.startNotification(t)

	orderID := uuid.New()
	publish(t, w.amqpURL, "", stockEvent(t, contracts.StockReserved, orderID, "amb@example.com"))
	testenv.Eventually(t, 60*time.Second, "the provider to send the first email", func() bool {
		return len(emails(t, p, "amb@example.com")) == 1
	})
	setFaults(t, p, `{"ambiguous_rate": 0}`) // for the attempts after the first

	rec := waitStatus(t, n, orderID, "completed", 60*time.Second)
	if rec.Attempts < 2 {
		t.Fatalf("record %+v: completed without a second attempt, so the first did not time out", rec)
	}
	wantOneEmail(t, p, "amb@example.com", orderID, "order-confirmed")
	if got := testenv.Metric(t, n.Base, "bookstore_notification_reconciled_total", `outcome="found"`); got != 1 {
		t.Fatalf("reconciled found = %v, want 1", got)
	}
	if got := testenv.Metric(t, p.Base, "bookstore_emailprovider_sent_total"); got != 1 {
		t.Fatalf("provider sent %v, want 1", got)
	}
}

// The provider is not there at first, and goes away again later: records retry with
// backoff and all complete once it is back; nothing lost, nothing sent twice.
func TestProviderOutageRetriesUntilBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	n := w.startNotification(t, "NOTIFICATION_MAX_ATTEMPTS", "1000")

	publishOrders := func(k int) []uuid.UUID {
		ids := make([]uuid.UUID, k)
		envs := make([]event.Envelope, k)
		for i := range ids {
			ids[i] = uuid.New()
			envs[i] = stockEvent(t, contracts.StockReserved, ids[i], "outage@example.com")
		}
		publish(t, w.amqpURL, "", envs...)
		return ids
	}
	waitRetrying := func(ids []uuid.UUID) {
		testenv.Eventually(t, 60*time.Second, "every record to be retrying", func() bool {
			for _, id := range ids {
				r := records(t, n, id)
				if len(r) != 1 || r[0].Attempts < 2 || r[0].Status == "completed" {
					return false
				}
			}
			return true
		})
	}

	before := publishOrders(4)
	waitRetrying(before) // the provider has not been started yet
	p := w.startProvider(t)
	for _, id := range before {
		waitStatus(t, n, id, "completed", 60*time.Second)
	}

	p.Stop(t)
	after := publishOrders(3)
	waitRetrying(after)
	p = w.startProvider(t)
	for _, id := range after {
		waitStatus(t, n, id, "completed", 60*time.Second)
	}

	list := emails(t, p, "outage@example.com")
	if len(list) != len(before)+len(after) {
		t.Fatalf("provider holds %d emails, want %d: %+v", len(list), len(before)+len(after), list)
	}
	for _, e := range list {
		if e.Deliveries != 1 {
			t.Fatalf("email %s delivered %d times", e.IdempotencyKey, e.Deliveries)
		}
	}
	if got := testenv.Metric(t, n.Base, "bookstore_notification_failed_total"); got != 0 {
		t.Fatalf("%v records failed", got)
	}
	if depth := testenv.QueueDepth(t, w.amqpURL, contracts.QueueNotificationStockEvents+".dlq"); depth != 0 {
		t.Fatalf("DLQ holds %d messages", depth)
	}
}

// Out of attempts: the record fails, the message is dead-lettered with it, and a metric
// counts it.
func TestOutOfAttemptsFailsToDLQ(t *testing.T) {
	t.Parallel()
	w := newWorld(t) // no provider at all
	n := w.startNotification(t, "NOTIFICATION_MAX_ATTEMPTS", "2")

	orderID := uuid.New()
	publish(t, w.amqpURL, "", stockEvent(t, contracts.StockRejected, orderID, "nobody@example.com"))
	rec := waitStatus(t, n, orderID, "failed", 60*time.Second)
	if rec.Attempts != 2 {
		t.Fatalf("record %+v, want failed after 2 attempts", rec)
	}
	testenv.Eventually(t, 60*time.Second, "the message to reach the DLQ", func() bool {
		return testenv.QueueDepth(t, w.amqpURL, contracts.QueueNotificationStockEvents+".dlq") == 1
	})
	if got := testenv.Metric(t, n.Base, "bookstore_notification_failed_total", `kind="order-rejected"`); got != 1 {
		t.Fatalf("failed metric = %v, want 1", got)
	}
	if got := testenv.Metric(t, n.Base, "bookstore_consumer_poison_total", `reason="notification-failed"`); got != 1 {
		t.Fatalf("poison metric = %v, want 1", got)
	}
}

// A message id that was processed once and comes back with different content is a
// producer bug, not a duplicate: it is dead-lettered with its reason, and sends nothing.
func TestIDReusedWithDifferentContentIsDeadLettered(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	n := w.startNotification(t)

	orderID := uuid.New()
	first := stockEvent(t, contracts.StockReserved, orderID, "ada@example.com")
	publish(t, w.amqpURL, "", first)
	waitStatus(t, n, orderID, "completed", 60*time.Second)

	altered := first
	altered.Data = json.RawMessage(strings.Replace(string(first.Data), `"quantity":2`, `"quantity":3`, 1))
	if string(altered.Data) == string(first.Data) {
		t.Fatalf("the test did not alter the data: %s", first.Data)
	}
	publish(t, w.amqpURL, "", altered)
	testenv.Eventually(t, 60*time.Second, "the altered message to reach the DLQ", func() bool {
		return testenv.QueueDepth(t, w.amqpURL, contracts.QueueNotificationStockEvents+".dlq") == 1
	})
	if got := testenv.Metric(t, n.Base, "bookstore_consumer_poison_total", `reason="`+event.ReasonContentMismatch+`"`); got != 1 {
		t.Fatalf("poison metric = %v, want 1", got)
	}
	wantOneEmail(t, p, "ada@example.com", orderID, "order-confirmed")
}

// Records whose message will never come back are finished by the sweeper: one left
// 'processing' by a real crash after the send (its message then purged from the queue),
// and one abandoned before its send reached the provider.
func TestSweeperFinishesAbandonedRecords(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	n := w.startNotification(t, "BOOKSTORE_FAILPOINTS", "notification/after-send=crash")

	crashed := uuid.New()
	publish(t, w.amqpURL, "", stockEvent(t, contracts.StockReserved, crashed, "sweep@example.com"))
	n.WaitKilled(t)
	// The broker puts the unacked message back; take it away for good.
	testenv.Eventually(t, 60*time.Second, "the unacked message to return to the queue", func() bool {
		return testenv.QueueDepth(t, w.amqpURL, contracts.QueueNotificationStockEvents) == 1
	})
	purge(t, w.amqpURL, contracts.QueueNotificationStockEvents)

	// A record abandoned before its send: the provider never heard of it.
	neverSent := uuid.New()
	db := connect(t, w.notification)
	_, err := db.Exec(context.Background(), `
		INSERT INTO notifications (order_id, kind, status, idempotency_key, recipient, subject, body, event_id, attempts, updated_at)
		VALUES ($1, 'order-rejected', 'processing', $2, 'sweep@example.com', 'Your order could not be fulfilled', 'Sorry.', $3, 1, now() - interval '1 minute')`,
		neverSent, "order/"+neverSent.String()+"/order-rejected", uuid.New())
	if err != nil {
		t.Fatal(err)
	}

	restarted := w.startNotification(t, "RECONCILE_AFTER", "1s", "SWEEP_INTERVAL", "200ms")
	waitStatus(t, restarted, crashed, "completed", 60*time.Second)
	waitStatus(t, restarted, neverSent, "completed", 60*time.Second)

	list := emails(t, p, "sweep@example.com")
	if len(list) != 2 || list[0].Deliveries != 1 || list[1].Deliveries != 1 {
		t.Fatalf("provider holds %+v, want two emails delivered once each", list)
	}
	if got := testenv.Metric(t, restarted.Base, "bookstore_notification_reconciled_total", `trigger="sweeper"`, `outcome="found"`); got < 1 {
		t.Fatalf("sweeper reconciled found = %v, want at least 1", got)
	}
	if got := testenv.Metric(t, restarted.Base, "bookstore_notification_reconciled_total", `trigger="sweeper"`, `outcome="not-found"`); got < 1 {
		t.Fatalf("sweeper reconciled not-found = %v, want at least 1", got)
	}
	if got := testenv.Metric(t, restarted.Base, "bookstore_consumer_processed_total"); got != 0 {
		t.Fatalf("the consumer processed %v messages; the sweeper alone should have finished", got)
	}
}

// Two notification instances share the queue while every outcome arrives three times
// (the same message twice and once more under a new id): deliveries of one outcome race
// on both instances, and still each order gets one email.
func TestTwoInstancesSendOncePerOrder(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t, "EMAILPROVIDER_LATENCY", "20ms") // widen the race
	a := w.startNotification(t, "CONSUMER_CONCURRENCY", "8")
	b := w.startNotification(t, "CONSUMER_CONCURRENCY", "8")

	const orders = 20
	ids := make([]uuid.UUID, orders)
	var envs []event.Envelope
	for i := range ids {
		ids[i] = uuid.New()
		env := stockEvent(t, contracts.StockReserved, ids[i], "twins@example.com")
		envs = append(envs, env, env, stockEvent(t, contracts.StockReserved, ids[i], "twins@example.com"))
	}
	publish(t, w.amqpURL, "", envs...)
	testenv.Eventually(t, 90*time.Second, "all 60 messages to be handled", func() bool {
		handled := 0.0
		for _, n := range []*testenv.Process{a, b} {
			handled += testenv.Metric(t, n.Base, "bookstore_consumer_processed_total") + testenv.Metric(t, n.Base, "bookstore_consumer_duplicates_total")
		}
		return handled == 3*orders
	})
	for _, id := range ids {
		waitStatus(t, a, id, "completed", 10*time.Second)
	}
	list := emails(t, p, "twins@example.com")
	if len(list) != orders {
		t.Fatalf("provider holds %d emails, want %d", len(list), orders)
	}
	for _, e := range list {
		if e.Deliveries != 1 {
			t.Fatalf("email %s delivered %d times", e.IdempotencyKey, e.Deliveries)
		}
	}
	if got := testenv.Metric(t, p.Base, "bookstore_emailprovider_sent_total"); got != orders {
		t.Fatalf("provider sent %v, want %d", got, orders)
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"DATABASE_URL", "AMQP_URL", "EMAILPROVIDER_URL", "http://localhost:8084", "PROVIDER_TIMEOUT", "NOTIFICATION_MAX_ATTEMPTS", "RECONCILE_AFTER", "SWEEP_INTERVAL", ":8083"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--help does not mention %s:\n%s", name, out.String())
		}
	}
}

func connect(t *testing.T, databaseURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func purge(t *testing.T, amqpURL, queue string) {
	t.Helper()
	if n, err := testenv.Channel(t, amqpURL).QueuePurge(queue, false); err != nil || n != 1 {
		t.Fatalf("purge %s: %d messages, %v", queue, n, err)
	}
}
