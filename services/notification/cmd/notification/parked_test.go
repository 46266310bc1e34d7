package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// A stock event was dead-lettered before its email went out (notification's database was
// down longer than the delivery limit, say). `dlq list` shows it; `dlq replay`, run
// through run() beside the running service, sends the one email; replaying the same event
// again is a duplicate and sends nothing.
func TestDLQReplaySendsTheEmailOnceAndASecondReplaySendsNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.startProvider(t)
	n := w.startNotification(t)
	vars := map[string]string{"AMQP_URL": w.amqpURL}

	order := uuid.New()
	ev := stockEvent(t, contracts.StockReserved, order, "ada@example.com")
	body, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	msg := amqp.Publishing{MessageId: ev.ID, Type: ev.Type, ContentType: event.ContentType, AppId: "inventory", Body: body}
	const queue = contracts.QueueNotificationStockEvents
	sut.PutInDLQ(t, w.amqpURL, queue, msg)

	testenv.Eventually(t, 20*time.Second, "the dead-letter gauge at 1", func() bool {
		v, ok := testenv.MetricOK(t, n.Base, "bookstore_consumer_dead_letters", `queue="`+queue+`"`)
		return ok && v == 1
	})
	out, err := testenv.Command(t, run, vars, "dlq", "list", queue)
	if err != nil || !strings.Contains(out, queue+".dlq: 1 message(s)") || !strings.Contains(out, ev.ID) {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}

	if out, err = testenv.Command(t, run, vars, "dlq", "replay"); err != nil || !strings.Contains(out, "moved 1 message(s)") {
		t.Fatalf("dlq replay: %v\n%s", err, out)
	}
	waitStatus(t, n, order, "completed", 60*time.Second)
	wantOneEmail(t, p, "ada@example.com", order, "order-confirmed")

	sut.PutInDLQ(t, w.amqpURL, queue, msg)
	if out, err = testenv.Command(t, run, vars, "dlq", "replay", "--id", ev.ID); err != nil || !strings.Contains(out, "moved 1 message(s)") {
		t.Fatalf("second dlq replay: %v\n%s", err, out)
	}
	testenv.Eventually(t, 60*time.Second, "the second copy acked as a duplicate", func() bool {
		return testenv.Metric(t, n.Base, "bookstore_consumer_duplicates_total") == 1
	})
	wantOneEmail(t, p, "ada@example.com", order, "order-confirmed")
	if got := testenv.Metric(t, p.Base, "bookstore_emailprovider_sent_total"); got != 1 {
		t.Errorf("provider sent %v emails, want 1", got)
	}

	if out, err = testenv.Command(t, run, vars, "outbox", "list-dead"); err == nil || !strings.Contains(err.Error(), "notification has no outbox") {
		t.Errorf("outbox list-dead on notification: %v\n%s\nwant a refusal", err, out)
	}
}
