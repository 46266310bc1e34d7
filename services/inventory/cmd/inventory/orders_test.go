package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// Orders through the real queue: what inventory announces, under each strategy, and
// what it does with messages it can never process.

// Every strategy answers orders end to end: the outcome leaves through inventory's own
// outbox and relay, with the AMQP properties of the contracts. The chaos run's comparison
// relies on the wrong strategies still working this far.
func TestEveryStrategyAnnouncesTheOutcome(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"inbox", "check-then-process", "naive"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			startInProcess(t, e, "INVENTORY_STRATEGY", strategy)
			reserve := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
			reject := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 11})
			publishEvent(t, e.amqpURL, reserve)
			publishEvent(t, e.amqpURL, reject)

			got := map[string]event.Envelope{}
			testenv.Eventually(t, 20*time.Second, "two outcome events", func() bool {
				for _, m := range sut.Drain(t, e.amqpURL, outcomesQueue, 50*time.Millisecond) {
					sut.CheckDelivery(t, m) // the CloudEvents SDK and api/schemas
					if m.AppId != "inventory" || m.Type == "" || m.ContentType != event.ContentType || m.DeliveryMode != 2 {
						t.Errorf("properties: app_id %q type %q content_type %q delivery_mode %d", m.AppId, m.Type, m.ContentType, m.DeliveryMode)
					}
					env, err := event.Decode(m.Body, contracts.StockReserved, contracts.StockRejected)
					if err != nil || env.ID != m.MessageId || env.Type != m.Type || env.Source != "bookstore/inventory" {
						t.Fatalf("event %s: %v (message id %s, type %s)", m.Body, err, m.MessageId, m.Type)
					}
					got[env.Subject] = env
				}
				return len(got) == 2
			})
			if got[reserve.Subject].Type != contracts.StockReserved || got[reject.Subject].Type != contracts.StockRejected {
				t.Errorf("outcomes: %s for the order of 2, %s for the order of 11", got[reserve.Subject].Type, got[reject.Subject].Type)
			}
			if n := reserved(t, testenv.Pool(t, e.databaseURL), dune); n != 2 {
				t.Errorf("Dune reserved = %d, want 2", n)
			}
		})
	}
}

// The broker delivers the same message twice (a lost ack, a relay that republished).
// inbox and check-then-process drop the copy; naive reserves it again. (check-then-process
// fails only in its window; TestCheckThenProcessCrashAfterCommitReservesTwice opens it.)
func TestRedeliveryUnderEachStrategy(t *testing.T) {
	t.Parallel()
	for strategy, want := range map[string]int{"inbox": 2, "check-then-process": 2, "naive": 4} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			base := startInProcess(t, e, "INVENTORY_STRATEGY", strategy)
			db := testenv.Pool(t, e.databaseURL)
			msg := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
			publishEvent(t, e.amqpURL, msg)
			// The first copy acked, not only reserved: check-then-process records the message
			// in a second transaction after the reservation, and a copy that arrives between
			// the two is that strategy's window, which TestCheckThenProcessCrashAfterCommit-
			// ReservesTwice opens on purpose. Here the copy must come after the first is done.
			testenv.Eventually(t, 20*time.Second, "first copy handled", func() bool {
				return testenv.Metric(t, base, "bookstore_consumer_processed_total", `consumer="inventory"`) == 1
			})
			publishEvent(t, e.amqpURL, msg)
			testenv.Eventually(t, 20*time.Second, "second copy handled", func() bool {
				if strategy == "naive" {
					return reserved(t, db, dune) == 4
				}
				return testenv.Metric(t, base, "bookstore_consumer_duplicates_total", `consumer="inventory"`) == 1
			})
			if n := reserved(t, db, dune); n != want {
				t.Errorf("Dune reserved = %d after two deliveries of an order of 2, want %d", n, want)
			}
		})
	}
}

// Every kind of message that can never succeed goes to inventory.order-placed.dlq at its
// first delivery, and the valid orders behind it are processed.
func TestPoisonMessagesAreDeadLetteredAndTheRestProcessed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)

	// A message id reused with different content needs the original processed first.
	original := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	publishEvent(t, e.amqpURL, original)
	testenv.Eventually(t, 20*time.Second, "the original reserved", func() bool { return reserved(t, db, dune) == 1 })

	withType := func(typ string) event.Envelope {
		env := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
		env.Type = typ
		return env
	}
	invalidData := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	invalidData.Data = []byte(`{"order_id": 42}`)
	reused := original
	reused.Data = []byte(strings.Replace(string(original.Data), `"quantity":1`, `"quantity":5`, 1))
	invalidEnvelope := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	invalidEnvelope.SpecVersion = "0.3"

	// Published under the routing key the queue is bound to: a producer that mislabels
	// what it sends is exactly how these reach a consumer.
	key := contracts.OrderPlaced
	poison := map[string][]byte{}
	notJSON := uuid.NewString()
	poison[notJSON] = []byte("this is not JSON")
	for _, env := range []event.Envelope{
		invalidEnvelope,
		withType("ordering.order-shipped.v1"), // unknown type
		withType("ordering.order-placed.v3"),  // unknown version
		invalidData,
		reused, // same id, different content
	} {
		poison[env.ID] = marshal(t, env)
	}
	for id, body := range poison {
		publishPoison(t, e.amqpURL, key, id, body)
	}
	valid := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
	publishEvent(t, e.amqpURL, valid)

	testenv.Eventually(t, 20*time.Second, "the valid order behind the poison reserved", func() bool { return reserved(t, db, dune) == 3 })
	dead := distinctIDs(sut.Drain(t, e.amqpURL, broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ(), time.Second))
	if len(dead) != len(poison) {
		t.Errorf("DLQ holds %d messages, want the %d poison ones", len(dead), len(poison))
	}
	for id := range poison {
		if _, ok := dead[id]; !ok {
			t.Errorf("poison message %s is not in the DLQ", id)
		}
	}
	if n := testenv.QueueDepth(t, e.amqpURL, contracts.QueueInventoryOrderPlaced); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
	// Counted by reason, on /metrics.
	_, metrics := request(t, http.MethodGet, base+"/metrics", "")
	for _, reason := range []string{"not-json", "invalid-envelope", "unknown-type", "invalid-data", "id-reused-with-different-content"} {
		if !strings.Contains(string(metrics), `reason="`+reason+`"`) {
			t.Errorf("/metrics has no poison count for reason %s", reason)
		}
	}
	if !strings.Contains(string(metrics), "bookstore_inventory_orders_total{") {
		t.Error("/metrics lacks bookstore_inventory_orders_total")
	}
}
