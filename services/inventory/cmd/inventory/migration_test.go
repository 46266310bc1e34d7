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

// The migration from ordering.order-placed.v1 to v2 through the real queue
// (docs/schema-evolution.md): inventory's queue is bound to both routing keys and its
// consumer reads both, while ordering's producers switch one by one.

var neuromancer = uuid.MustParse("018f2b1e-0000-7000-8000-000000000003") // 1000 on hand

// orderPlacedV2 is the v2 event of a new order, as ordering writes it with
// ORDERING_ORDER_PLACED_VERSION=2; name is the optional customer.name ("" leaves it out).
func orderPlacedV2(t *testing.T, name string, lines ...contracts.Line) event.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	env, err := event.New("bookstore/ordering", contracts.OrderPlacedV2, id.String(), 1, contracts.OrderPlacedV2Data{
		OrderID: id, Customer: contracts.Customer{Email: "ada@example.com", Name: name}, Lines: lines, PlacedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// outcomesOf reads inventory's outcome events off outcomesQueue until want distinct
// orders have one, then a little longer, and returns them by order id.
func outcomesOf(t *testing.T, amqpURL string, want int) map[string][]event.Envelope {
	t.Helper()
	got := map[string][]event.Envelope{}
	ids := map[string]bool{}
	read := func(quiet time.Duration) {
		for _, m := range sut.Drain(t, amqpURL, outcomesQueue, quiet) {
			env, err := event.Decode(m.Body, contracts.StockReserved, contracts.StockRejected)
			if err != nil {
				t.Fatalf("outcome %s: %v", m.Body, err)
			}
			if !ids[env.ID] { // a relay may publish an event twice, with the same id
				ids[env.ID] = true
				got[env.Subject] = append(got[env.Subject], env)
			}
		}
	}
	testenv.Eventually(t, 30*time.Second, "an outcome for every order", func() bool {
		read(50 * time.Millisecond)
		return len(got) >= want
	})
	read(500 * time.Millisecond) // anything announced twice would arrive by now
	return got
}

// Mid-migration: some producers still write v1, some v2 already, each under its own
// routing key, and the broker redelivers some of each. Forty orders, interleaved, every
// message sent twice: each order reserved once, with one outcome event carrying its
// customer's email, nothing dead-lettered.
func TestMixedV1AndV2OrdersAreEachReservedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)

	const orders = 40
	var envs []event.Envelope
	for i := range orders {
		line := contracts.Line{BookID: neuromancer, Quantity: 1 + i%3}
		switch i % 4 {
		case 0, 2:
			envs = append(envs, orderPlaced(t, line))
		case 1:
			envs = append(envs, orderPlacedV2(t, "", line))
		case 3:
			envs = append(envs, orderPlacedV2(t, "Ada Lovelace", line))
		}
	}
	want := 0
	for _, env := range envs {
		var d struct {
			Lines []contracts.Line `json:"lines"`
		}
		decodeJSON(t, env.Data, &d)
		want += d.Lines[0].Quantity
	}
	for _, env := range envs {
		publishEvent(t, e.amqpURL, env)
	}
	for _, env := range envs {
		publishEvent(t, e.amqpURL, env)
	}

	got := outcomesOf(t, e.amqpURL, orders)
	for _, env := range envs {
		evs := got[env.Subject]
		if len(evs) != 1 || evs[0].Type != contracts.StockReserved {
			t.Errorf("order %s (%s): outcomes %d, want one %s", env.Subject, env.Type, len(evs), contracts.StockReserved)
			continue
		}
		var d contracts.StockReservedData
		decodeJSON(t, evs[0].Data, &d)
		if d.CustomerEmail != "ada@example.com" || len(d.Lines) != 1 {
			t.Errorf("order %s (%s): outcome data %+v", env.Subject, env.Type, d)
		}
	}
	if n := reserved(t, db, neuromancer); n != want {
		t.Errorf("Neuromancer reserved = %d, want %d (each order once)", n, want)
	}
	for typ, n := range map[string]int{contracts.OrderPlaced: orders / 2, contracts.OrderPlacedV2: orders / 2} {
		if got := testenv.Count(t, db, "SELECT count(*) FROM inbox WHERE event_type = $1", typ); got != n {
			t.Errorf("inbox rows of %s = %d, want %d", typ, got, n)
		}
	}
	testenv.Eventually(t, 20*time.Second, "every copy handled", func() bool {
		return testenv.Metric(t, base, "bookstore_consumer_processed_total", `consumer="inventory"`)+
			testenv.Metric(t, base, "bookstore_consumer_duplicates_total", `consumer="inventory"`) >= 2*orders
	})
	if n := testenv.QueueDepth(t, e.amqpURL, broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ()); n != 0 {
		t.Errorf("%d messages dead-lettered, want none", n)
	}
}

// A producer published an order as v1, was switched to v2 and published the same order
// again (a new message id, the other version): the inbox cannot tell, the order_answers
// table's key can. Both arrive back to back: one reservation, one outcome event, one
// answer, and the second message acked as a duplicate.
func TestSameOrderAsV1AndAsV2ThroughTheQueueIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)

	v1 := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
	var d contracts.OrderPlacedData
	decodeJSON(t, v1.Data, &d)
	v2, err := event.New(v1.Source, contracts.OrderPlacedV2, v1.Subject, 1, contracts.OrderPlacedV2Data{
		OrderID: d.OrderID, Customer: contracts.Customer{Email: d.CustomerEmail}, Lines: d.Lines, PlacedAt: d.PlacedAt,
	})
	if err != nil {
		t.Fatal(err)
	}
	publishEvent(t, e.amqpURL, v1)
	publishEvent(t, e.amqpURL, v2)

	testenv.Eventually(t, 20*time.Second, "both messages handled", func() bool {
		return testenv.Metric(t, base, "bookstore_consumer_processed_total", `consumer="inventory"`) == 1 &&
			testenv.Metric(t, base, "bookstore_consumer_duplicates_total", `consumer="inventory"`) == 1
	})
	if evs := outcomesOf(t, e.amqpURL, 1)[v1.Subject]; len(evs) != 1 {
		t.Errorf("outcome events for the order = %d, want 1", len(evs))
	}
	if n := reserved(t, db, dune); n != 2 {
		t.Errorf("Dune reserved = %d, want 2", n)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM order_answers WHERE order_id = $1", d.OrderID); n != 1 {
		t.Errorf("order_answers rows = %d, want 1", n)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM inbox"); n != 2 {
		t.Errorf("inbox rows = %d, want 2: both message ids handled", n)
	}
	_, metrics := request(t, http.MethodGet, base+"/metrics", "")
	if !strings.Contains(string(metrics), `outcome="already-answered"`) {
		t.Error("/metrics counts no already-answered order")
	}
}

// A v2 without its new required field (customer.email), or one still in v1's shape, can
// never be reserved: each is dead-lettered at its first delivery as invalid-data, and the
// valid v2 behind them is reserved.
func TestV2WithoutItsRequiredFieldIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)

	withData := func(data string) event.Envelope {
		env := orderPlacedV2(t, "", contracts.Line{BookID: dune, Quantity: 1})
		env.Data = []byte(strings.ReplaceAll(data, "ORDER", env.Subject))
		return env
	}
	rest := `"order_id": "ORDER", "lines": [{"book_id": "` + dune.String() + `", "quantity": 1}], "placed_at": "2026-11-29T21:00:00Z"`
	poison := []event.Envelope{
		withData(`{` + rest + `}`),                                      // no customer at all
		withData(`{"customer": {"name": "Ada"}, ` + rest + `}`),         // a customer without email
		withData(`{"customer_email": "ada@example.com", ` + rest + `}`), // v1's shape labelled v2
	}
	for _, env := range poison {
		publishPoison(t, e.amqpURL, env.Type, env.ID, marshal(t, env))
	}
	valid := orderPlacedV2(t, "", contracts.Line{BookID: dune, Quantity: 2})
	publishEvent(t, e.amqpURL, valid)

	testenv.Eventually(t, 20*time.Second, "the valid v2 behind the poison reserved", func() bool { return reserved(t, db, dune) == 2 })
	dead := distinctIDs(sut.Drain(t, e.amqpURL, broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ(), time.Second))
	if len(dead) != len(poison) {
		t.Errorf("DLQ holds %d messages, want the %d poison ones", len(dead), len(poison))
	}
	for _, env := range poison {
		if _, ok := dead[env.ID]; !ok {
			t.Errorf("poison v2 %s is not in the DLQ", env.Data)
		}
	}
	if n := testenv.Metric(t, base, "bookstore_consumer_poison_total", `consumer="inventory"`, `reason="invalid-data"`); n != float64(len(poison)) {
		t.Errorf("poison counted as invalid-data: %v, want %d", n, len(poison))
	}
}
