package main

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each test here opens one failure window of the ordering service and shows what it
// leaves behind.

// The process dies after the order, its lines, its outbox row and its idempotency key are
// written and before COMMIT: none of them may exist, and the client's retry with the same
// key must place the order.
func TestCrashBeforeCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startProcess(t, e, "BOOKSTORE_FAILPOINTS", "ordering/before-commit=crash")

	const key = "crash-then-retry"
	body := orderBody("ada@example.com", 2)
	req, _ := http.NewRequest(http.MethodPost, p.Base+"/orders", stringsReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("POST /orders answered %s; the process should have died before answering", resp.Status)
	}
	p.WaitKilled(t)

	db := testenv.Pool(t, e.databaseURL)
	for _, table := range []string{"orders", "order_lines", "outbox", "idempotency_keys"} {
		if n := testenv.Count(t, db, "SELECT count(*) FROM "+table); n != 0 {
			t.Errorf("%s has %d rows after a crash before commit, want 0", table, n)
		}
	}

	// The client retries with the same key against the restarted service: the key was
	// never stored, so this places the order (201, not a replay of an order that does
	// not exist), and exactly one order and one event come of the two requests.
	p2 := startProcess(t, e)
	resp, got := postOrder(t, p2.Base, key, body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry with the same key: %d (Idempotent-Replayed %q) %s, want 201 and a new order",
			resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), got)
	}
	var o struct{ ID uuid.UUID }
	decodeJSON(t, got, &o)
	if n := testenv.Count(t, db, "SELECT count(*) FROM idempotency_keys WHERE key = $1 AND order_id = $2", key, o.ID); n != 1 {
		t.Errorf("the retry stored its key for order %s %d times, want 1", o.ID, n)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM orders"); n != 1 {
		t.Errorf("orders = %d after the crash and the retry, want 1", n)
	}
	msgs := sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, 2*time.Second)
	if len(msgs) != 1 {
		t.Errorf("events = %d, want 1", len(msgs))
	}
}

// The relay dies after the broker confirmed the event and before the row is marked
// published. The event must be published again after the restart, with the same message
// id: a duplicate for consumers to drop, never a loss.
func TestCrashAfterPublishRepublishesWithTheSameID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A restarted relay under the same RELAY_ID takes its claims back at once; under
	// another id it would wait for the lease to run out.
	p := startProcess(t, e, "BOOKSTORE_FAILPOINTS", "relay/after-publish=crash", "RELAY_ID", "relay-a")
	// The response may or may not beat the relay's crash; the order is committed either way.
	_, _ = http.Post(p.Base+"/orders", "application/json", stringsReader(orderBody("ada@example.com", 2)))
	p.WaitKilled(t)

	db := testenv.Pool(t, e.databaseURL)
	var id string
	if err := db.QueryRow(context.Background(), "SELECT id::text FROM outbox WHERE state = 'pending'").Scan(&id); err != nil {
		t.Fatalf("the outbox row should still be pending after the crash: %v", err)
	}
	first := sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, time.Second)
	if len(first) != 1 || first[0].MessageId != id {
		t.Fatalf("before restart: %d messages, want the one with id %s", len(first), id)
	}

	startProcess(t, e, "RELAY_ID", "relay-a")
	testenv.Eventually(t, 20*time.Second, "outbox row published after restart", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == 1
	})
	second := sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, time.Second)
	if len(second) != 1 || second[0].MessageId != id {
		t.Fatalf("after restart: %d messages, want a second copy of id %s", len(second), id)
	}
	if string(second[0].Body) != string(first[0].Body) {
		t.Errorf("the republished body differs from the first publish:\n%s\n%s", first[0].Body, second[0].Body)
	}
}

// RabbitMQ is unreachable for longer than the relay's whole retry budget (shrunk to two
// attempts) while orders keep coming. The API keeps answering 201, /readyz says why, and
// the outage spends no row's attempts: none is parked, and once the broker is back every
// event is published exactly once, in order.
func TestBrokerOutageKeepsTakingOrdersAndDrainsAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u, _ := url.Parse(e.amqpURL)
	proxy := testenv.NewProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.Addr
	proxied := e
	proxied.amqpURL = viaProxy.String()
	base := startInProcess(t, proxied, "RELAY_MAX_ATTEMPTS", "2")

	proxy.Cut()
	const n = 20
	for i := range n {
		resp, body := postOrder(t, base, "", orderBody("ada@example.com", 1+i%3))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("order %d during the outage: %d %s", i, resp.StatusCode, body)
		}
	}
	// Every try to reach the broker is one refused connection: wait for five times the
	// relay's budget of attempts.
	testenv.Eventually(t, 60*time.Second, "the outage outlasts the relay's budget", func() bool { return proxy.Refused() >= 5*2 })
	if resp, err := http.Get(base + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage: %v %v, want 503", err, resp.Status)
	}
	db := testenv.Pool(t, e.databaseURL)
	if c := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'pending' AND attempts = 0"); c != n {
		t.Fatalf("%d of %d rows pending with no attempt spent during the outage", c, n)
	}

	proxy.Restore()
	testenv.Eventually(t, 60*time.Second, "outbox drained after the broker came back", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == n
	})
	msgs := sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, time.Second)
	ids := map[string]bool{}
	for _, m := range msgs {
		ids[m.MessageId] = true
	}
	if len(ids) != n || len(msgs) != n {
		t.Errorf("queue holds %d messages of %d distinct events, want %d of %d", len(msgs), len(ids), n, n)
	}
	if c := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE attempts > 0 OR state = 'dead'"); c != 0 {
		t.Errorf("%d rows spent attempts on the outage", c)
	}
}

// SIGTERM arrives after the broker acked an event and before its row is marked. A
// graceful shutdown must still record what the broker has: the row ends published, and
// the restarted service does not publish it again.
func TestSIGTERMBetweenTheBrokersAckAndTheMarkLeavesTheRowPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startProcess(t, e, "BOOKSTORE_FAILPOINTS", "relay/after-publish=delay(5s)")
	if resp, body := postOrder(t, p.Base, "sigterm-1", orderBody("ada@example.com", 1)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	testenv.Eventually(t, 10*time.Second, "the broker has the event", func() bool {
		return testenv.QueueDepth(t, e.amqpURL, contracts.QueueInventoryOrderPlaced) == 1
	})
	p.Stop(t) // while the relay waits in the failpoint, between the ack and the mark

	db := testenv.Pool(t, e.databaseURL)
	if c := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'"); c != 1 {
		t.Fatalf("the acked row is not published after a graceful shutdown")
	}
	p2 := startProcess(t, e)
	if resp, body := postOrder(t, p2.Base, "sigterm-2", orderBody("ada@example.com", 1)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST after restart: %d %s", resp.StatusCode, body)
	}
	// Rows are marked after their publish, so once both are marked the queue is final.
	testenv.Eventually(t, 20*time.Second, "the second order's event published", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == 2
	})
	if d := testenv.QueueDepth(t, e.amqpURL, contracts.QueueInventoryOrderPlaced); d != 2 {
		t.Errorf("queue holds %d events, want 2: the first was published again after the restart", d)
	}
}

// Postgres becomes unreachable and comes back. While it is gone the API answers 503
// (unavailable, with Retry-After) without storing anything and /readyz names Postgres; afterwards the pool, the relay and
// its LISTEN connection recover on their own, and new orders flow end to end without a
// restart.
func TestPostgresOutageRecoversWithoutRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u, _ := url.Parse(e.databaseURL)
	proxy := testenv.NewProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.Addr
	proxied := e
	proxied.databaseURL = viaProxy.String()
	base := startInProcess(t, proxied)

	proxy.Cut()
	resp, body := postOrder(t, base, "", orderBody("ada@example.com", 1))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("order during the outage: %d, Retry-After %q (%s); want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if r, err := http.Get(base + "/readyz"); err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage: %v %v, want 503", err, r.Status)
	}
	time.Sleep(500 * time.Millisecond) // let the relay and the listener notice
	proxy.Restore()

	testenv.Eventually(t, 20*time.Second, "the API takes orders again", func() bool {
		resp, _ := postOrder(t, base, "after-outage", orderBody("ada@example.com", 1))
		return resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK
	})
	var msgs int
	testenv.Eventually(t, 20*time.Second, "the order placed after the outage is published", func() bool {
		msgs += len(sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, 100*time.Millisecond))
		return msgs == 1
	})
}

// The stock outcome is committed and the process dies before the ack. The broker
// redelivers it after the restart; the inbox makes it a duplicate, so the order makes
// exactly one transition.
func TestCrashAfterStockOutcomeCommitIsADuplicateAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := startProcess(t, e, "BOOKSTORE_FAILPOINTS", "ordering/after-commit=crash")
	resp, body := postOrder(t, p.Base, "", orderBody("ada@example.com", 2))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	var o struct{ ID uuid.UUID }
	decodeJSON(t, body, &o)
	publishStockReserved(t, e.amqpURL, o.ID)
	p.WaitKilled(t)

	db := testenv.Pool(t, e.databaseURL)
	if n := testenv.Count(t, db, "SELECT count(*) FROM orders WHERE status = 'confirmed' AND version = 2"); n != 1 {
		t.Fatalf("the outcome was not committed before the crash")
	}
	p2 := startProcess(t, e)
	testenv.Eventually(t, 20*time.Second, "the redelivered outcome is acked as a duplicate", func() bool {
		return testenv.Metric(t, p2.Base, "bookstore_consumer_duplicates_total", `consumer="ordering"`) == 1
	})
	if n := testenv.Count(t, db, "SELECT count(*) FROM orders WHERE status = 'confirmed' AND version = 2"); n != 1 {
		t.Errorf("order made more than one transition")
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM inbox"); n != 1 {
		t.Errorf("inbox rows = %d, want 1", n)
	}
}

func publishStockReserved(t *testing.T, amqpURL string, orderID uuid.UUID) {
	t.Helper()
	env, err := event.New("bookstore/inventory", contracts.StockReserved, orderID.String(), 1,
		contracts.StockReservedData{OrderID: orderID, CustomerEmail: "ada@example.com", Lines: []contracts.Line{{BookID: uuid.MustParse(dune), Quantity: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := broker.EventMessage(env, "inventory")
	if err != nil {
		t.Fatal(err)
	}
	sut.Publish(t, amqpURL, msg)
}
