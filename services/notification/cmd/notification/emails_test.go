package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each order outcome is emailed exactly once: however often its event arrives, in a
// batch, or on two instances at once. Also the read API and --help.

// The same event delivered twice, and the same outcome published again under a new
// message id (a producer duplicate): one record, one email. The provider call also
// carries the trace the event arrived with.
func TestEachOrderOutcomeSendsOneEmailHoweverOftenItArrives(t *testing.T) {
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

// Events that wait in the queue together are handled as a batch: phase one for all in one
// transaction, the sends at once. Each order still gets exactly one email, and a copy of
// an event inside the batch sends the batch down the one-at-a-time path, which finds it a
// duplicate.
func TestEventsWaitingTogetherAreEmailedAsABatchOnceEach(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	testenv.Declare(t, w.amqpURL, contracts.Topology)
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

// A batch in which one send is refused records the others' emails as sent in its own
// phase two: none of them is left 'processing' to wait out its lease and be reconciled.
func TestABatchWithARefusedSendCompletesEveryOtherEmailWithoutReconciling(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	testenv.Declare(t, w.amqpURL, contracts.Topology)
	const orders, refused = 20, 8
	ids := make([]uuid.UUID, orders)
	envs := make([]event.Envelope, orders)
	for i := range ids {
		ids[i] = uuid.New()
		envs[i] = stockEvent(t, contracts.StockReserved, ids[i], fmt.Sprintf("refused%d@example.com", i))
	}
	// Another email holds this order's key: its send is refused, its neighbours' are not.
	squat(t, p, "order/"+ids[refused].String()+"/order-confirmed")
	publish(t, w.amqpURL, "", envs...)
	// One worker: while it handles the first event alone, the rest wait for it as batches.
	n := w.startNotification(t, "CONSUMER_CONCURRENCY", "1")

	waitStatus(t, n, ids[refused], "failed", 60*time.Second)
	for i, id := range ids {
		if i != refused {
			waitStatus(t, n, id, "completed", 60*time.Second)
			wantOneEmail(t, p, fmt.Sprintf("refused%d@example.com", i), id, "order-confirmed")
		}
	}
	if got := testenv.Metric(t, n.Base, "bookstore_consumer_batch_size_count"); got == 0 {
		t.Fatal("no batch was handled: the events went one at a time")
	}
	if got := testenv.Metric(t, n.Base, "bookstore_notification_reconciled_total", `outcome="found"`); got != 0 {
		t.Fatalf("%v emails the provider had were found by reconciliation: the batch left them unrecorded", got)
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
	for _, name := range []string{"DATABASE_URL", "AMQP_URL", "EMAILPROVIDER_URL", "http://127.0.0.1:8084", "PROVIDER_TIMEOUT", "NOTIFICATION_MAX_ATTEMPTS", "RECONCILE_AFTER", "SWEEP_INTERVAL", ":8083"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--help does not mention %s:\n%s", name, out.String())
		}
	}
}
