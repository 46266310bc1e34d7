package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// What ordering parks, brought back by its own commands (parked.go), run through run()
// beside the running service, as an operator runs them beside the deployed one.

// placeOrder places an order of one Dune and returns its id.
func placeOrder(t *testing.T, base string) string {
	t.Helper()
	resp, body := postOrder(t, base, "", orderBody("ada@example.com", 1))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders: %d %s", resp.StatusCode, body)
	}
	var order struct {
		ID string `json:"id"`
	}
	decodeJSON(t, body, &order)
	return order.ID
}

func orderStatus(t *testing.T, base, id string) string {
	t.Helper()
	resp, err := http.Get(base + "/orders/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var order struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&order); err != nil {
		t.Fatal(err)
	}
	return order.Status
}

// The stock answer for an order was dead-lettered (ordering's database was down longer
// than the delivery limit, say), so the order stays pending. `dlq list` shows it, `dlq
// replay` confirms the order, and replaying the same answer again is a duplicate.
func TestDLQReplayConfirmsTheOrderOnceAndASecondReplayIsADuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vars := e.vars()
	base := sut.StartInProcess(t, run, vars)
	id := placeOrder(t, base)
	orderID := uuid.MustParse(id)
	answer, err := event.New("bookstore/inventory", contracts.StockReserved, id, 1,
		contracts.StockReservedData{OrderID: orderID, CustomerEmail: "ada@example.com", Lines: []contracts.Line{{BookID: uuid.MustParse(dune), Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(answer)
	msg := amqp.Publishing{MessageId: answer.ID, Type: answer.Type, ContentType: event.ContentType, AppId: "inventory", Body: body}
	const queue = contracts.QueueOrderingStockEvents
	sut.PutInDLQ(t, e.amqpURL, queue, msg)

	testenv.Eventually(t, 20*time.Second, "the dead-letter gauge at 1", func() bool {
		n, ok := testenv.MetricOK(t, base, "bookstore_consumer_dead_letters", `queue="`+queue+`"`)
		return ok && n == 1
	})
	out, err := testenv.Command(t, run, vars, "dlq", "list")
	if err != nil || !strings.Contains(out, queue+".dlq: 1 message(s)") || !strings.Contains(out, answer.ID) || !strings.Contains(out, contracts.StockReserved) {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}
	if status := orderStatus(t, base, id); status != "pending" {
		t.Fatalf("order %s before the replay, want pending", status)
	}

	if out, err = testenv.Command(t, run, vars, "dlq", "replay", queue); err != nil || !strings.Contains(out, "moved 1 message(s)") {
		t.Fatalf("dlq replay: %v\n%s", err, out)
	}
	testenv.Eventually(t, 20*time.Second, "the order confirmed", func() bool { return orderStatus(t, base, id) == "confirmed" })

	sut.PutInDLQ(t, e.amqpURL, queue, msg)
	if out, err = testenv.Command(t, run, vars, "dlq", "replay", "--id", answer.ID); err != nil || !strings.Contains(out, "moved 1 message(s)") {
		t.Fatalf("second dlq replay: %v\n%s", err, out)
	}
	testenv.Eventually(t, 20*time.Second, "the second copy acked as a duplicate", func() bool {
		return testenv.Metric(t, base, "bookstore_consumer_duplicates_total", `consumer="ordering"`) == 1
	})
	if got := testenv.Metric(t, base, "bookstore_consumer_processed_total", `consumer="ordering"`); got != 1 {
		t.Errorf("processed %v stock answers, want 1", got)
	}
	if status := orderStatus(t, base, id); status != "confirmed" {
		t.Errorf("order %s after the duplicate, want confirmed", status)
	}
}

// An OrderPlaced event no queue was bound to take is refused by the broker (returned)
// and parked as dead at once (RELAY_MAX_ATTEMPTS=1): the order would stay pending for
// ever. `outbox list-dead` shows it; once the binding is back, `outbox retry-dead` sends
// it to inventory's queue, exactly once. The relay trusts `mandatory` here
// (RELAY_QUEUE_CHECK=mandatory): by default it binds the queue back before publishing,
// and the unbinding below would park nothing.
func TestOutboxRetryDeadSendsTheParkedOrderOnceAfterTheFix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vars := e.vars("RELAY_MAX_ATTEMPTS", "1", "RELAY_QUEUE_CHECK", "mandatory")
	base := sut.StartInProcess(t, run, vars)
	db := testenv.Pool(t, e.databaseURL)

	// A first event leaves: the relay's channel is open and has declared the topology,
	// which it does not do again while that channel lives.
	placeOrder(t, base)
	testenv.Eventually(t, 20*time.Second, "the first event published", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})
	ch := sut.Channel(t, e.amqpURL)
	if err := ch.QueueUnbind(contracts.QueueInventoryOrderPlaced, contracts.OrderPlaced, contracts.Exchange, nil); err != nil {
		t.Fatal(err)
	}
	second := placeOrder(t, base)
	var deadID string
	testenv.Eventually(t, 20*time.Second, "the second event parked as dead", func() bool {
		return db.QueryRow(t.Context(), "SELECT id::text FROM outbox WHERE state = 'dead'").Scan(&deadID) == nil
	})
	out, err := testenv.Command(t, run, vars, "outbox", "list-dead")
	if err != nil || !strings.Contains(out, "1 dead outbox row(s)") || !strings.Contains(out, deadID) || !strings.Contains(out, "order/"+second) {
		t.Fatalf("outbox list-dead: %v\n%s\nwant the second order's event", err, out)
	}

	if err := ch.QueueBind(contracts.QueueInventoryOrderPlaced, contracts.OrderPlaced, contracts.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	if out, err = testenv.Command(t, run, vars, "outbox", "retry-dead"); err != nil || !strings.Contains(out, "moved 1 dead outbox row(s)") {
		t.Fatalf("outbox retry-dead: %v\n%s", err, out)
	}
	testenv.Eventually(t, 20*time.Second, "the retried event published", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == 2
	})
	copies := map[string]int{}
	for _, m := range sut.ReadAll(t, e.amqpURL, contracts.QueueInventoryOrderPlaced) {
		copies[m.MessageId]++
	}
	if len(copies) != 2 || copies[deadID] != 1 {
		t.Errorf("inventory's queue received %v, want both orders' events, the retried one (%s) once", copies, deadID)
	}
	for id, n := range copies {
		if n != 1 {
			t.Errorf("event %s received %d times, want once", id, n)
		}
	}
}
