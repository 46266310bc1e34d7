package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each test here opens one failure window of the notification service (a crash after
// the send, a record abandoned, an id reused with other content) and shows what it leaves
// behind.

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

	wantReconciledOnce(t, w.startNotification(t), p, orderID, "crash@example.com")
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
