package main

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

func orderCancelled(t *testing.T, placed event.Envelope, seq int64) event.Envelope {
	t.Helper()
	env, err := event.New("bookstore/ordering", contracts.OrderCancelled, placed.Subject, seq, contracts.OrderCancelledData{
		OrderID: uuid.MustParse(placed.Subject), CustomerEmail: "ada@example.com", CancelledAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Killed at inventory/before-release-commit, with the order's row, the deleted
// reservations, the lowered reserved count and StockReleased written and not committed:
// Postgres rolls all of it back, RabbitMQ redelivers the cancellation, and the restarted
// process releases the copies once and announces it once.
func TestCrashBeforeReleaseCommitReleasesOnceAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startProcess(t, e, "BOOKSTORE_FAILPOINTS", contracts.InventoryBeforeReleaseCommit+"=crash", "RELAY_ID", "relay-a")
	db := testenv.Pool(t, e.databaseURL)
	before := reserved(t, db, dune)
	placed := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
	publishEvent(t, e.amqpURL, placed)
	testenv.Eventually(t, 20*time.Second, "the placement reserved", func() bool { return reserved(t, db, dune) == before+2 })

	publishEvent(t, e.amqpURL, orderCancelled(t, placed, 2))
	p.WaitKilled(t)
	if n := reserved(t, db, dune); n != before+2 {
		t.Errorf("after the crash: Dune reserved %d, want %d (nothing released)", n, before+2)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE event_type = $1", contracts.StockReleased); n != 0 {
		t.Errorf("after the crash: %d StockReleased rows, want 0", n)
	}

	startProcess(t, e, "RELAY_ID", "relay-a")
	testenv.Eventually(t, 30*time.Second, "the redelivered cancellation applied and announced", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE event_type = $1 AND state = 'published'", contracts.StockReleased) == 1
	})
	if n := reserved(t, db, dune); n != before {
		t.Errorf("Dune reserved %d, want %d", n, before)
	}
	var types []string
	for _, m := range distinctIDs(sut.Drain(t, e.amqpURL, outcomesQueue, time.Second)) {
		types = append(types, m.Type)
	}
	if len(types) != 2 {
		t.Errorf("events published %v, want StockReserved and one StockReleased", types)
	}
	if n := testenv.QueueDepth(t, e.amqpURL, broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ()); n != 0 {
		t.Errorf("%d messages dead-lettered, want 0", n)
	}
}

// Through the queue and the consumer's workers: cancellations published before their
// placements leave nothing reserved, whichever worker takes which first, and every order
// is answered with one StockReleased.
func TestCancellationsPublishedBeforeTheirPlacementsReserveNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)
	before := reserved(t, db, dune)
	const orders = 6
	for range orders {
		placed := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
		publishEvent(t, e.amqpURL, orderCancelled(t, placed, 2))
		publishEvent(t, e.amqpURL, placed)
	}
	testenv.Eventually(t, 30*time.Second, "every event consumed", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM inbox") == 2*orders
	})
	if n := reserved(t, db, dune); n != before {
		t.Errorf("Dune reserved %d, want %d", n, before)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE event_type = $1", contracts.StockReleased); n != orders {
		t.Errorf("%d StockReleased, want %d", n, orders)
	}
	// Two workers: a placement may still be applied before its cancellation, and then
	// released by it. Either way nothing stays reserved.
	if n := testenv.Count(t, db, "SELECT count(*) FROM reservations"); n != 0 {
		t.Errorf("%d reservations left, want 0", n)
	}
}
