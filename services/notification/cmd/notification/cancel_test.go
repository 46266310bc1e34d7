package main

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// stockReleased is inventory's StockReleased for an order: released names the copies
// given back (a confirmed order's), none for an order that held nothing.
func stockReleased(t *testing.T, orderID uuid.UUID, to string, released bool) event.Envelope {
	t.Helper()
	lines := []contracts.Line{}
	if released {
		lines = append(lines, contracts.Line{BookID: uuid.MustParse("018f2b1e-0000-7000-8000-000000000001"), Quantity: 2})
	}
	env, err := event.New("bookstore/inventory", contracts.StockReleased, orderID.String(), 2,
		contracts.StockReleasedData{OrderID: orderID, CustomerEmail: to, Lines: lines})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// A cancelled order gets one "order cancelled" email under its own key, however often its
// StockReleased arrives; an order that held nothing gets it without waiting for any
// confirmation.
func TestOneCancellationEmailPerCancelledOrder(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	n := w.startNotification(t)

	id := uuid.New()
	first := stockReleased(t, id, "cancel@example.com", false)
	publish(t, w.amqpURL, "", first, first, stockReleased(t, id, "cancel@example.com", false))
	rec := waitStatus(t, n, id, "completed", 60*time.Second)
	if rec.Kind != "order-cancelled" || rec.IdempotencyKey != "order/"+id.String()+"/order-cancelled" {
		t.Fatalf("record %+v", rec)
	}
	testenv.Eventually(t, 60*time.Second, "all three messages handled", func() bool {
		return testenv.Metric(t, n.Base, "bookstore_consumer_processed_total") == 1 && testenv.Metric(t, n.Base, "bookstore_consumer_duplicates_total") == 2
	})
	wantOneEmail(t, p, "cancel@example.com", id, "order-cancelled")
	if got := testenv.Metric(t, n.Base, "bookstore_notification_deferred_total"); got != 0 {
		t.Errorf("deferred %v times, want 0: nothing was reserved, no confirmation is due", got)
	}
}

// The StockReleased of a confirmed order reaches notification before its StockReserved,
// and the provider is down: the cancellation email waits (requeued, counted) until the
// confirmation email is out, and then goes, each once. The cancellation's record is
// created only after the confirmation's was completed.
func TestCancellationEmailNeverGoesBeforeTheConfirmation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	n := w.startNotification(t, "NOTIFICATION_MAX_ATTEMPTS", "1000")

	id := uuid.New()
	publish(t, w.amqpURL, "", stockReleased(t, id, "both@example.com", true))
	testenv.Eventually(t, 30*time.Second, "the cancellation email deferred", func() bool {
		return testenv.Metric(t, n.Base, "bookstore_notification_deferred_total") >= 2
	})
	publish(t, w.amqpURL, "", stockEvent(t, contracts.StockReserved, id, "both@example.com"))
	testenv.Eventually(t, 30*time.Second, "the confirmation tried without a provider", func() bool {
		r := records(t, n, id)
		return len(r) == 1 && r[0].Kind == "order-confirmed" && r[0].Attempts >= 2
	})
	if r := records(t, n, id); len(r) != 1 {
		t.Fatalf("records %+v: the cancellation email went ahead of its confirmation", r)
	}

	p := w.startProvider(t)
	testenv.Eventually(t, 60*time.Second, "both emails completed", func() bool {
		r := records(t, n, id)
		return len(r) == 2 && r[0].Status == "completed" && r[1].Status == "completed"
	})
	list := emails(t, p, "both@example.com")
	if len(list) != 2 || list[0].Deliveries != 1 || list[1].Deliveries != 1 {
		t.Fatalf("provider holds %+v, want the confirmation and the cancellation once each", list)
	}
	conn := connect(t, w.notification)
	var confirmedAt, cancelCreated time.Time
	if err := conn.QueryRow(context.Background(), `SELECT
		(SELECT completed_at FROM notifications WHERE order_id = $1 AND kind = 'order-confirmed'),
		(SELECT created_at FROM notifications WHERE order_id = $1 AND kind = 'order-cancelled')`, id).Scan(&confirmedAt, &cancelCreated); err != nil {
		t.Fatal(err)
	}
	if cancelCreated.Before(confirmedAt) {
		t.Errorf("cancellation record created at %s, before the confirmation completed at %s", cancelCreated, confirmedAt)
	}
	if depth := testenv.QueueDepth(t, w.amqpURL, contracts.QueueNotificationStockEvents+".dlq"); depth != 0 {
		t.Fatalf("DLQ holds %d messages", depth)
	}
}
