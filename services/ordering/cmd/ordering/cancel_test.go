package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

func postCancel(t *testing.T, base, id, key string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/orders/"+id+"/cancel", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /orders/%s/cancel: %v", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

type orderWithHistory struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	History []struct {
		Event string    `json:"event"`
		At    time.Time `json:"at"`
	} `json:"history"`
}

func (o orderWithHistory) events() string {
	var out []string
	for _, h := range o.History {
		out = append(out, h.Event)
	}
	return strings.Join(out, ",")
}

func getOrderWithHistory(t *testing.T, base, id string) orderWithHistory {
	t.Helper()
	resp, err := http.Get(base + "/orders/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /orders/%s: %d %s", id, resp.StatusCode, b)
	}
	var o orderWithHistory
	decodeJSON(t, b, &o)
	return o
}

// orderEvents drains inventory's queue and returns the envelopes of one order's events.
func orderEvents(t *testing.T, amqpURL, id string) []event.Envelope {
	t.Helper()
	var out []event.Envelope
	for _, m := range sut.Drain(t, amqpURL, contracts.QueueInventoryOrderPlaced, 2*time.Second) {
		sut.CheckDelivery(t, m)
		env, err := event.Decode(m.Body, m.Type)
		if err != nil {
			t.Fatalf("envelope: %v\n%s", err, m.Body)
		}
		if env.Subject == id {
			out = append(out, env)
		}
	}
	return out
}

// A pending order is cancelled once: the answer and GET show it cancelled with its
// history, its OrderCancelled follows its OrderPlaced with the next sequence, the same
// key replays the first answer, and any other cancel is refused.
func TestCancelAPendingOrderWritesOneOrderCancelledWithTheNextSequence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	id := placeOrder(t, base)

	first, firstBody := postCancel(t, base, id, "cancel-1")
	if first.StatusCode != http.StatusOK || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("cancel: %d %s", first.StatusCode, firstBody)
	}
	var cancelled orderWithHistory
	decodeJSON(t, firstBody, &cancelled)
	if cancelled.Status != "cancelled" || cancelled.events() != "placed,cancelled" {
		t.Errorf("cancelled order = %s", firstBody)
	}
	if got := getOrderWithHistory(t, base, id); got.Status != "cancelled" || got.events() != "placed,cancelled" {
		t.Errorf("GET after cancel = %+v", got)
	}

	again, againBody := postCancel(t, base, id, "cancel-1")
	if again.StatusCode != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" || string(againBody) != string(firstBody) {
		t.Errorf("replay: %d replayed=%q %s\nwant the first body %s", again.StatusCode, again.Header.Get("Idempotent-Replayed"), againBody, firstBody)
	}
	other, otherBody := postCancel(t, base, id, "cancel-2")
	if other.StatusCode != http.StatusConflict || !strings.Contains(string(otherBody), "not-cancellable") {
		t.Errorf("second cancel with a new key: %d %s, want 409 not-cancellable", other.StatusCode, otherBody)
	}
	if resp, body := postCancel(t, base, id, ""); resp.StatusCode != http.StatusConflict {
		t.Errorf("second cancel without a key: %d %s, want 409", resp.StatusCode, body)
	}
	// The same key for another order is another request.
	if resp, body := postCancel(t, base, placeOrder(t, base), "cancel-1"); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "Idempotency-Key") {
		t.Errorf("same key, other order: %d %s, want 422", resp.StatusCode, body)
	}
	if resp, body := postCancel(t, base, uuid.NewString(), ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown order: %d %s, want 404", resp.StatusCode, body)
	}
	if resp, body := postCancel(t, base, "nope", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad id: %d %s, want 400", resp.StatusCode, body)
	}

	events := orderEvents(t, e.amqpURL, id)
	if len(events) != 2 {
		t.Fatalf("events of the order = %d, want OrderPlaced and OrderCancelled", len(events))
	}
	placed, cancel := events[0], events[1]
	if placed.Type != contracts.OrderPlaced || placed.Sequence != "1" || cancel.Type != contracts.OrderCancelled || cancel.Sequence != "2" {
		t.Errorf("events = %s seq %s, %s seq %s; want order-placed 1 then order-cancelled 2", placed.Type, placed.Sequence, cancel.Type, cancel.Sequence)
	}
	var data contracts.OrderCancelledData
	if err := cancel.DecodeData(&data); err != nil {
		t.Fatal(err)
	}
	if data.OrderID.String() != id || data.CustomerEmail != "ada@example.com" || !data.CancelledAt.Equal(cancelled.History[1].At) {
		t.Errorf("OrderCancelled data = %+v, order %s", data, firstBody)
	}
}

// A confirmed order can be cancelled too: its OrderCancelled has sequence 3, the version
// after placed (1) and confirmed (2). A rejected order cannot; a stock outcome that
// arrives after its order was cancelled leaves it cancelled.
func TestCancelAConfirmedOrderButNotARejectedOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	confirmed, rejected, early := placeOrder(t, base), placeOrder(t, base), placeOrder(t, base)
	publishStockOutcome(t, e.amqpURL, contracts.StockReserved, confirmed)
	publishStockOutcome(t, e.amqpURL, contracts.StockRejected, rejected)
	testenv.Eventually(t, 20*time.Second, "both outcomes applied", func() bool {
		return orderStatus(t, base, confirmed) == "confirmed" && orderStatus(t, base, rejected) == "rejected"
	})

	if resp, body := postCancel(t, base, confirmed, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel confirmed: %d %s", resp.StatusCode, body)
	}
	if got := getOrderWithHistory(t, base, confirmed); got.events() != "placed,confirmed,cancelled" {
		t.Errorf("history = %s", got.events())
	}
	resp, body := postCancel(t, base, rejected, "")
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "rejected") {
		t.Errorf("cancel rejected: %d %s, want 409 naming the status", resp.StatusCode, body)
	}

	if resp, body := postCancel(t, base, early, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel pending: %d %s", resp.StatusCode, body)
	}
	publishStockOutcome(t, e.amqpURL, contracts.StockReserved, early)
	testenv.Eventually(t, 20*time.Second, "the late outcome is consumed", func() bool {
		return testenv.QueueDepth(t, e.amqpURL, contracts.QueueOrderingStockEvents) == 0 &&
			testenv.Count(t, testenv.Pool(t, e.databaseURL), "SELECT count(*) FROM inbox") == 3
	})
	if got := getOrderWithHistory(t, base, early); got.Status != "cancelled" || got.events() != "placed,cancelled" {
		t.Errorf("cancelled order after a late outcome = %+v", got)
	}

	var seqs []string
	for _, env := range orderEvents(t, e.amqpURL, confirmed) {
		seqs = append(seqs, env.Type+"#"+env.Sequence)
	}
	if want := contracts.OrderPlaced + "#1," + contracts.OrderCancelled + "#3"; strings.Join(seqs, ",") != want {
		t.Errorf("events of the confirmed order = %v, want %s", seqs, want)
	}
}

// Twenty cancels of one order at once, each with its own key: one wins, every other is
// refused, and one OrderCancelled is written. The same key twenty times at once: one
// cancellation, the others replays or in flight.
func TestConcurrentCancelsWriteOneEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)

	for _, sameKey := range []bool{false, true} {
		id := placeOrder(t, base)
		const n = 20
		byStatus := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := fmt.Sprintf("%s-%d", id, i)
				if sameKey {
					key = id
				}
				resp, _ := postCancel(t, base, id, key)
				mu.Lock()
				byStatus[resp.StatusCode]++
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		t.Logf("same key %v: responses by status %v", sameKey, byStatus)
		if byStatus[http.StatusOK]+byStatus[http.StatusConflict] != n || byStatus[http.StatusOK] < 1 || (!sameKey && byStatus[http.StatusOK] != 1) {
			t.Errorf("same key %v: want one cancellation and the rest refused (or replayed), got %v", sameKey, byStatus)
		}
		if got := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type = $2", id, contracts.OrderCancelled); got != 1 {
			t.Errorf("same key %v: OrderCancelled rows = %d, want 1", sameKey, got)
		}
		if got := testenv.Count(t, db, "SELECT count(*) FROM order_history WHERE order_id = $1 AND event = 'cancelled'", id); got != 1 {
			t.Errorf("same key %v: cancelled history rows = %d, want 1", sameKey, got)
		}
	}
}

func publishStockOutcome(t *testing.T, amqpURL, typ, id string) {
	t.Helper()
	orderID := uuid.MustParse(id)
	lines := []contracts.Line{{BookID: uuid.MustParse(dune), Quantity: 1}}
	var data any = contracts.StockReservedData{OrderID: orderID, CustomerEmail: "ada@example.com", Lines: lines}
	if typ == contracts.StockRejected {
		data = contracts.StockRejectedData{OrderID: orderID, CustomerEmail: "ada@example.com", Lines: lines, Reason: "insufficient stock"}
	}
	env, err := event.New(contracts.InventorySource, typ, id, 1, data)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := broker.EventMessage(env, "inventory")
	if err != nil {
		t.Fatal(err)
	}
	sut.Publish(t, amqpURL, msg)
}

// Inventory's StockReleased ends a cancelled order's history; a copy of it under another
// message id adds nothing.
func TestStockReleasedEndsACancelledOrdersHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	id := placeOrder(t, base)
	if resp, body := postCancel(t, base, id, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	for range 2 {
		env, err := event.New(contracts.InventorySource, contracts.StockReleased, id, 1,
			contracts.StockReleasedData{OrderID: uuid.MustParse(id), CustomerEmail: "ada@example.com", Lines: []contracts.Line{}})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := broker.EventMessage(env, "inventory")
		if err != nil {
			t.Fatal(err)
		}
		sut.Publish(t, e.amqpURL, msg)
	}
	db := testenv.Pool(t, e.databaseURL)
	testenv.Eventually(t, 20*time.Second, "both copies consumed", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM inbox") == 2
	})
	if got := getOrderWithHistory(t, base, id); got.Status != "cancelled" || got.events() != "placed,cancelled,released" {
		t.Errorf("order after its release = %+v", got)
	}
}
