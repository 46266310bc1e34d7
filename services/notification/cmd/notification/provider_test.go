package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// The provider misbehaves: it times out after sending, it is away for a while, it never
// comes back. Nothing is lost, nothing is sent twice, and a record out of attempts fails.

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

	wantReconciledOnce(t, n, p, orderID, "amb@example.com")
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
func TestARecordOutOfAttemptsFailsAndItsMessageIsDeadLettered(t *testing.T) {
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

// Reconciliation takes as sent only the email it meant. Another email already sits under
// the record's key in notification's own account (a leaked key was used to take it
// first); the retry's lookup finds it, sees another recipient and content, and does not
// complete the record with it: the record fails, its message is dead-lettered for an
// operator, and the lookup is counted as a mismatch.
func TestReconciliationTakesOnlyTheEmailItMeantAsSent(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	orderID := uuid.New()
	key := "order/" + orderID.String() + "/order-confirmed"

	p := w.startProvider(t)
	squat(t, p, key)
	p.Stop(t)

	// The provider is away, so the first attempt's outcome is unknown and the next one
	// asks before sending.
	n := w.startNotification(t, "NOTIFICATION_MAX_ATTEMPTS", "1000")
	publish(t, w.amqpURL, "", stockEvent(t, contracts.StockReserved, orderID, "ada@example.com"))
	testenv.Eventually(t, 60*time.Second, "the record to be retrying", func() bool {
		r := records(t, n, orderID)
		return len(r) == 1 && r[0].Attempts >= 2
	})
	p = w.startProvider(t)

	var last []record
	testenv.Eventually(t, 60*time.Second, "the record to end", func() bool {
		last = records(t, n, orderID)
		return len(last) == 1 && (last[0].Status == "completed" || last[0].Status == "failed")
	})
	if last[0].Status != "failed" {
		t.Fatalf("record %+v: the squatter's email to eve was taken as ada's", last[0])
	}
	if got := testenv.Metric(t, n.Base, "bookstore_notification_reconciled_total", `outcome="mismatch"`); got < 1 {
		t.Fatalf("mismatches counted: %v, want at least 1", got)
	}
	testenv.Eventually(t, 60*time.Second, "the message to reach the DLQ", func() bool {
		return testenv.QueueDepth(t, w.amqpURL, contracts.QueueNotificationStockEvents+".dlq") == 1
	})
	if list := emails(t, p, "ada@example.com"); len(list) != 0 {
		t.Fatalf("an email to ada went out under another key: %+v", list)
	}
}

// squat sends another email under key, as another client of the account: the provider
// then refuses notification's own send under it (422), and a lookup finds the squatter's.
func squat(t *testing.T, p *testenv.Process, key string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.Base+"/v1/emails",
		strings.NewReader(`{"to":"eve@example.com","subject":"Your order is confirmed","text":"Pay here: http://evil.example/"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+providerKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the squatter's send: %d", resp.StatusCode)
	}
}
