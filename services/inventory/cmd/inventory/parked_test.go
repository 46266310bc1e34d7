package main

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// What inventory parks, brought back by its own commands (parked.go), run through run()
// beside the running service, as an operator runs them beside the deployed one.

// relayed is the AMQP message of an order as ordering's relay publishes it, and as the
// broker dead-letters it.
func relayed(t *testing.T, env event.Envelope) amqp.Publishing {
	t.Helper()
	return amqp.Publishing{MessageId: env.ID, Type: env.Type, ContentType: event.ContentType, AppId: "ordering", UserId: testenv.Login(testenv.AMQPBase()), Body: marshal(t, env)}
}

// inOrder reports whether each of subs occurs in s, in this order.
func inOrder(s string, subs ...string) bool {
	for _, sub := range subs {
		i := strings.Index(s, sub)
		if i < 0 {
			return false
		}
		s = s[i+len(sub):]
	}
	return true
}

// Orders dead-lettered while inventory could not take them (say, its database was down
// for longer than the delivery limit) wait in the DLQ, shown by `dlq list` and by the
// gauge. `dlq replay --id` moves one and leaves the others in their order; replaying an
// order that was reserved already changes nothing (the inbox drops it as a duplicate);
// the rest follow, and every order is reserved exactly once.
func TestDLQReplayReservesEachOrderOnceAndAReplayedDuplicateChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vars := e.vars()
	base := sut.StartInProcess(t, run, vars)
	db := testenv.Pool(t, e.databaseURL)
	a := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	b := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
	c := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 3})
	const queue = contracts.QueueInventoryOrderPlaced
	dlq := broker.Queue{Name: queue}.DLQ()
	sut.PutInDLQ(t, e.amqpURL, queue, relayed(t, a), relayed(t, b), relayed(t, c))

	testenv.Eventually(t, 20*time.Second, "the dead-letter gauge at 3", func() bool {
		n, ok := testenv.MetricOK(t, base, "bookstore_consumer_dead_letters", `queue="`+queue+`"`)
		return ok && n == 3
	})
	out, err := testenv.Command(t, run, vars, "dlq", "list")
	if err != nil || !inOrder(out, dlq+": 3 message(s)", a.ID, b.ID, c.ID) {
		t.Fatalf("dlq list: %v\n%s\nwant the three orders, oldest first", err, out)
	}

	out, err = testenv.Command(t, run, vars, "dlq", "replay", queue, "--id", b.ID)
	if err != nil || !strings.Contains(out, "moved 1 message(s) from "+dlq+" back to "+queue) {
		t.Fatalf("dlq replay --id b: %v\n%s", err, out)
	}
	testenv.Eventually(t, 20*time.Second, "order b reserved", func() bool { return reserved(t, db, dune) == 2 })
	testenv.Eventually(t, 10*time.Second, "a and c back in the DLQ", func() bool { return testenv.QueueDepth(t, e.amqpURL, dlq) == 2 })
	if out, err = testenv.Command(t, run, vars, "dlq", "list", queue); err != nil || !inOrder(out, dlq+": 2 message(s)", a.ID, c.ID) || strings.Contains(out, b.ID) {
		t.Fatalf("dlq list after replaying b: %v\n%s\nwant a then c, and no b", err, out)
	}

	// b again, as if it had been dead-lettered twice: a duplicate, nothing reserved.
	sut.PutInDLQ(t, e.amqpURL, queue, relayed(t, b))
	if out, err = testenv.Command(t, run, vars, "dlq", "replay", "--id", b.ID); err != nil || !strings.Contains(out, "moved 1 message(s)") {
		t.Fatalf("second dlq replay --id b: %v\n%s", err, out)
	}
	testenv.Eventually(t, 20*time.Second, "the second b acked as a duplicate", func() bool {
		return testenv.Metric(t, base, "bookstore_consumer_duplicates_total", `consumer="inventory"`) == 1
	})
	if n := reserved(t, db, dune); n != 2 {
		t.Fatalf("Dune reserved = %d after b was replayed twice, want 2", n)
	}

	testenv.Eventually(t, 10*time.Second, "a and c back in the DLQ", func() bool { return testenv.QueueDepth(t, e.amqpURL, dlq) == 2 })
	if out, err = testenv.Command(t, run, vars, "dlq", "replay"); err != nil || !strings.Contains(out, "moved 2 message(s)") {
		t.Fatalf("dlq replay of the rest: %v\n%s", err, out)
	}
	testenv.Eventually(t, 20*time.Second, "a and c reserved", func() bool { return reserved(t, db, dune) == 6 })
	for _, order := range []event.Envelope{a, b, c} {
		if n := testenv.Count(t, db, "SELECT count(*) FROM reservations WHERE order_id = $1", order.Subject); n != 1 {
			t.Errorf("order %s has %d reservations, want 1", order.Subject, n)
		}
	}
	if got := testenv.Metric(t, base, "bookstore_consumer_processed_total", `consumer="inventory"`); got != 3 {
		t.Errorf("processed %v messages, want 3", got)
	}
	testenv.Eventually(t, 20*time.Second, "the dead-letter gauge at 0", func() bool {
		n, ok := testenv.MetricOK(t, base, "bookstore_consumer_dead_letters", `queue="`+queue+`"`)
		return ok && n == 0
	})
	if out, err = testenv.Command(t, run, vars, "dlq", "list"); err != nil || !strings.Contains(out, dlq+": empty") {
		t.Errorf("dlq list at the end: %v\n%s", err, out)
	}
}

// An answer no queue was bound to take is refused by the broker (returned) and parked as
// dead at once (RELAY_MAX_ATTEMPTS=1). `outbox list-dead` shows it; once the bindings are
// back, `outbox retry-dead --id` sends it, exactly once. The relay trusts `mandatory`
// here (RELAY_QUEUE_CHECK=mandatory): by default it binds the queues back before
// publishing, and the unbinding below would park nothing.
func TestOutboxRetryDeadSendsTheParkedAnswerOnceAfterTheFix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vars := e.vars("RELAY_MAX_ATTEMPTS", "1", "RELAY_QUEUE_CHECK", "mandatory")
	sut.StartInProcess(t, run, vars)
	db := testenv.Pool(t, e.databaseURL)

	// A first answer leaves: the relay's channel is open and has declared the topology,
	// which it does not do again while that channel lives.
	first := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	publishEvent(t, e.amqpURL, first)
	testenv.Eventually(t, 20*time.Second, "the first answer published", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})
	if out, err := testenv.Command(t, run, vars, "outbox", "list-dead"); err != nil || !strings.Contains(out, "no dead outbox rows") {
		t.Fatalf("outbox list-dead with nothing dead: %v\n%s", err, out)
	}

	// The cause: no queue is bound for the answer's type any more.
	ch := sut.Channel(t, e.amqpURL)
	bindings := []struct{ queue, key string }{
		{contracts.QueueOrderingStockEvents, contracts.StockReserved},
		{contracts.QueueNotificationStockEvents, contracts.StockReserved},
		{outcomesQueue, "inventory.#"},
	}
	for _, b := range bindings {
		if err := ch.QueueUnbind(b.queue, b.key, contracts.Exchange, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Published on this channel: sut.Publish would declare the topology, bindings and all.
	second := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
	if err := ch.PublishWithContext(t.Context(), contracts.Exchange, second.Type, true, false, relayed(t, second)); err != nil {
		t.Fatal(err)
	}
	var deadID string
	testenv.Eventually(t, 20*time.Second, "the second answer parked as dead", func() bool {
		return db.QueryRow(t.Context(), "SELECT id::text FROM outbox WHERE state = 'dead'").Scan(&deadID) == nil
	})
	out, err := testenv.Command(t, run, vars, "outbox", "list-dead")
	if err != nil || !inOrder(out, "1 dead outbox row(s)", deadID, contracts.StockReserved) || !strings.Contains(out, "no queue is bound") {
		t.Fatalf("outbox list-dead: %v\n%s\nwant the dead answer, its type and its error", err, out)
	}

	// The fix, then the retry.
	for _, b := range bindings {
		if err := ch.QueueBind(b.queue, b.key, contracts.Exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if out, err = testenv.Command(t, run, vars, "outbox", "retry-dead", "--id", deadID); err != nil || !strings.Contains(out, "moved 1 dead outbox row(s)") {
		t.Fatalf("outbox retry-dead: %v\n%s", err, out)
	}
	testenv.Eventually(t, 20*time.Second, "the retried answer published", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == 2
	})
	copies := map[string]int{}
	for _, m := range sut.ReadAll(t, e.amqpURL, outcomesQueue) {
		copies[m.MessageId]++
	}
	if len(copies) != 2 || copies[deadID] != 1 {
		t.Errorf("answers received: %v, want the first and the retried one (%s), once each", copies, deadID)
	}
	for id, n := range copies {
		if n != 1 {
			t.Errorf("answer %s received %d times, want once", id, n)
		}
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM reservations WHERE order_id = $1", second.Subject); n != 1 {
		t.Errorf("the second order has %d reservations, want 1", n)
	}
	if out, err = testenv.Command(t, run, vars, "outbox", "list-dead"); err != nil || !strings.Contains(out, "no dead outbox rows") {
		t.Errorf("outbox list-dead after the retry: %v\n%s", err, out)
	}
}

func TestDLQCommandsRefuseAnotherServicesQueue(t *testing.T) {
	t.Parallel()
	out, err := testenv.Command(t, run, map[string]string{"AMQP_URL": "amqp://nowhere.invalid/"}, "dlq", "replay", contracts.QueueOrderingStockEvents)
	if err == nil || !strings.Contains(err.Error(), "inventory consumes inventory.order-placed, not ordering.stock-events") {
		t.Errorf("dlq replay ordering.stock-events: %v\n%s\nwant a refusal naming inventory's own queue", err, out)
	}
}
