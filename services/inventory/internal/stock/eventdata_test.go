package stock_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/orderevent"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// An event's customer email is an address by the rule ordering's API applies to an
// order (contracts.AddressProblem), and its other strings are bounded: inventory reads
// what anyone holding a broker user could publish, and what it accepts it stores and
// carries on to notification in its own events. Each of these is poison, in every
// version of OrderPlaced and in OrderCancelled.
func TestAnEventsStringsObeyTheRulesOfTheHTTPSide(t *testing.T) {
	emails := map[string]string{
		"50 KB long":          strings.Repeat("a", 50_000) + "@example.com",
		"a display name":      "Ada <ada@example.com>",
		"an IP literal":       "ada@[127.0.0.1]",
		"a single label":      "ada@localhost",
		"a bidi override":     "ada\u202e@example.com",
		"not an address":      "ada",
		"a 65-character user": strings.Repeat("a", 65) + "@example.com",
	}
	line := contracts.Line{BookID: dune, Quantity: 1}
	for name, email := range emails {
		v1 := orderPlaced(t, line)
		v1.Data = mustJSON(t, contracts.OrderPlacedData{OrderID: uuid.MustParse(v1.Subject), CustomerEmail: email, Lines: []contracts.Line{line}, PlacedAt: time.Now()})
		if _, err := orderevent.OrderOf(v1); !isPoison(err, event.ReasonInvalidData) {
			t.Errorf("v1 with an email %s: err = %v, want poison %s", name, err, event.ReasonInvalidData)
		}
		v2 := orderPlacedV2(t, line)
		v2.Data = mustJSON(t, contracts.OrderPlacedV2Data{OrderID: uuid.MustParse(v2.Subject), Customer: contracts.Customer{Email: email}, Lines: []contracts.Line{line}, PlacedAt: time.Now()})
		if _, err := orderevent.OrderOf(v2); !isPoison(err, event.ReasonInvalidData) {
			t.Errorf("v2 with an email %s: err = %v, want poison %s", name, err, event.ReasonInvalidData)
		}
		cancelled := orderCancelled(t, v1, 2)
		cancelled.Data = mustJSON(t, contracts.OrderCancelledData{OrderID: uuid.MustParse(v1.Subject), CustomerEmail: email, CancelledAt: time.Now()})
		if _, err := orderevent.CancellationOf(cancelled); !isPoison(err, event.ReasonInvalidData) {
			t.Errorf("a cancellation with an email %s: err = %v, want poison %s", name, err, event.ReasonInvalidData)
		}
	}
	for name, customer := range map[string]string{
		"50 KB long":      strings.Repeat("A", 50_000),
		"a control":       "Ada\x1b[31m",
		"a NUL":           "Ada\x00",
		"a bidi override": "Ada\u202e",
	} {
		v2 := orderPlacedV2(t, line)
		v2.Data = mustJSON(t, contracts.OrderPlacedV2Data{OrderID: uuid.MustParse(v2.Subject), Customer: contracts.Customer{Email: "ada@example.com", Name: customer}, Lines: []contracts.Line{line}, PlacedAt: time.Now()})
		if _, err := orderevent.OrderOf(v2); !isPoison(err, event.ReasonInvalidData) {
			t.Errorf("v2 with a customer name %s: err = %v, want poison %s", name, err, event.ReasonInvalidData)
		}
	}
	// What ordering's API accepts still passes.
	v2 := orderPlacedV2(t, line)
	v2.Data = mustJSON(t, contracts.OrderPlacedV2Data{OrderID: uuid.MustParse(v2.Subject), Customer: contracts.Customer{Email: "ada.lovelace+books@example.co.uk", Name: "Ada Lovelace"}, Lines: []contracts.Line{line}, PlacedAt: time.Now()})
	if _, err := orderevent.OrderOf(v2); err != nil {
		t.Errorf("a valid v2: %v", err)
	}
}

// The largest event inventory writes, a StockRejected of MaxLines lines to a
// 254-character address, with its reason and a full W3C trace context, is many times
// smaller than what a consumer reads: the consumer's limit refuses only what no
// producer of Bookstore writes.
func TestTheLargestEventIsFarBelowTheConsumersLimit(t *testing.T) {
	lines := make([]contracts.Line, contracts.MaxLines)
	for i := range lines {
		lines[i] = contracts.Line{BookID: uuid.Must(uuid.NewV7()), Quantity: contracts.MaxQuantity}
	}
	id := uuid.Must(uuid.NewV7())
	email := strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 58) + ".io"
	if p := contracts.AddressProblem(email); p != "" || len(email) != contracts.MaxAddressLen {
		t.Fatalf("the longest address %q (%d): %s", email, len(email), p)
	}
	env, err := event.New(contracts.InventorySource, contracts.StockRejected, id.String(), 2, contracts.StockRejectedData{
		OrderID: id, CustomerEmail: email, Lines: lines,
		Reason: "insufficient stock for " + uuid.NewString() + ": 99 available, 100 wanted",
	})
	if err != nil {
		t.Fatal(err)
	}
	env.TraceParent = "00-" + strings.Repeat("a", 32) + "-" + strings.Repeat("b", 16) + "-01"
	env.TraceState = strings.Repeat("k", 512) // the W3C bound of a whole tracestate
	body := mustJSON(t, env)
	t.Logf("the largest legitimate event: %d bytes; the consumer's limit: %d", len(body), consumer.DefaultMaxMessageSize)
	if len(body)*8 > consumer.DefaultMaxMessageSize {
		t.Errorf("the largest legitimate event is %d bytes, less than 8 times below the consumer's limit of %d", len(body), consumer.DefaultMaxMessageSize)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
