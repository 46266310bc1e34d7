package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// ORDERING_ORDER_PLACED_VERSION picks the version of ordering.order-placed a new order's
// event is written in (docs/schema-evolution.md). --help lists it with its default, 1,
// and a version ordering cannot write stops the service at start.
func TestOrderPlacedVersionIsAVariableCheckedAtStart(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ORDERING_ORDER_PLACED_VERSION") {
		t.Errorf("--help does not mention ORDERING_ORDER_PLACED_VERSION:\n%s", out.String())
	}
	getenv := func(name string) string {
		if name == "ORDERING_ORDER_PLACED_VERSION" {
			return "3"
		}
		return ""
	}
	err := run(t.Context(), nil, getenv, &out)
	if err == nil || !strings.Contains(err.Error(), "ORDERING_ORDER_PLACED_VERSION") {
		t.Errorf("ORDERING_ORDER_PLACED_VERSION=3: err = %v, want it refused", err)
	}
}

// A rolling switch: two ordering instances on one database, one still writing v1 (the
// default), one already v2. Each order's event goes through the one outbox and relay
// path: an outbox row whose event_type and schema_version name its version, and a message
// on inventory.order-placed under that type's key to the queue, whose data reads strictly
// as that version's.
func TestVersion2IsWrittenThroughTheSameOutboxBesideVersion1(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v1 := startInProcess(t, e)
	v2 := startInProcess(t, e, "ORDERING_ORDER_PLACED_VERSION", "2")
	db := testenv.Pool(t, e.databaseURL)

	ids := map[string]string{} // order id -> the type its event must have
	for base, typ := range map[string]string{v1: contracts.OrderPlaced, v2: contracts.OrderPlacedV2} {
		resp, body := postOrder(t, base, "", orderBody("ada@example.com", 2))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /orders: %d %s", resp.StatusCode, body)
		}
		var o struct {
			ID string `json:"id"`
		}
		decodeJSON(t, body, &o)
		ids[o.ID] = typ
	}

	for id, typ := range ids {
		var eventType string
		var version, seq int
		if err := db.QueryRow(t.Context(), "SELECT event_type, schema_version, sequence FROM outbox WHERE aggregate_id = $1", id).Scan(&eventType, &version, &seq); err != nil {
			t.Fatalf("outbox row of %s: %v", id, err)
		}
		want := map[string]int{contracts.OrderPlaced: 1, contracts.OrderPlacedV2: 2}[typ]
		if eventType != typ || version != want || seq != 1 {
			t.Errorf("outbox row of %s: %s, schema_version %d, sequence %d; want %s, %d, 1", id, eventType, version, seq, typ, want)
		}
	}

	var msgs int
	testenv.Eventually(t, 20*time.Second, "both events published", func() bool {
		for _, m := range sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, 100*time.Millisecond) {
			msgs++
			sut.CheckDelivery(t, m) // v1 and v2 against api/schemas, and the CloudEvents SDK
			env, err := event.Decode(m.Body, contracts.OrderPlaced, contracts.OrderPlacedV2)
			if err != nil {
				t.Fatalf("%s: %v", m.Body, err)
			}
			if want := ids[env.Subject]; env.Type != want || m.RoutingKey != broker.QueueKey(want, contracts.QueueInventoryOrderPlaced) || m.Type != want {
				t.Errorf("order %s: type %s, routing key %s, AMQP type %s; want %s (its key %s)", env.Subject, env.Type, m.RoutingKey, m.Type, want, broker.QueueKey(want, contracts.QueueInventoryOrderPlaced))
			}
			email := ""
			if env.Type == contracts.OrderPlacedV2 {
				var d contracts.OrderPlacedV2Data
				if err := env.DecodeData(&d); err != nil {
					t.Fatalf("v2 data: %v", err)
				}
				email = d.Customer.Email
			} else {
				var d contracts.OrderPlacedData
				if err := env.DecodeData(&d); err != nil {
					t.Fatalf("v1 data: %v", err)
				}
				email = d.CustomerEmail
			}
			if email != "ada@example.com" {
				t.Errorf("%s of %s: customer email %q", env.Type, env.Subject, email)
			}
		}
		return msgs >= 2
	})
	if msgs != 2 {
		t.Errorf("%d messages, want 2", msgs)
	}
	testenv.Eventually(t, 20*time.Second, "both outbox rows marked published", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state <> 'published'") == 0
	})
}
