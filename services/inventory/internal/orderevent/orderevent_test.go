package orderevent

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// FuzzOrderPlacedIsPoisonOrAValidOrder: whatever the data of an order-placed event, v1
// or v2, inventory's decoder either refuses it as poison (the consumer dead-letters it)
// or hands over an order that keeps docs/contracts.md, checked here again: the id the
// subject names, a customer email of storable text, 1 to 50 lines of distinct books
// with quantities 1 to 100. Never a panic, never an error the consumer would retry.
func FuzzOrderPlacedIsPoisonOrAValidOrder(f *testing.F) {
	const id = "018f2b1e-0000-7000-8000-0000000000aa"
	const book = "018f2b1e-0000-7000-8000-000000000001"
	lines := `"lines":[{"book_id":"` + book + `","quantity":2}],"placed_at":"2026-11-29T21:00:00Z"`
	v1 := `{"order_id":"` + id + `","customer_email":"ada@example.com",` + lines + `}`
	v2 := `{"order_id":"` + id + `","customer":{"email":"ada@example.com","name":"Ada"},` + lines + `}`
	for _, seed := range []struct {
		v             uint8
		subject, data string
	}{
		{1, id, v1},
		{2, id, v2},
		{2, id, strings.Replace(v2, `,"name":"Ada"`, "", 1)},
		{1, id, v2}, // a v2 in v1's type
		{2, id, v1}, // a v1 in v2's type
		{3, id, v1},
		{2, id, `{"order_id":"` + id + `","customer":{"name":"Ada"},` + lines + `}`},
		{2, id, `{"order_id":"` + id + `","customer":null,` + lines + `}`},
		{1, "018f2b1e-0000-7000-8000-0000000000ab", v1},
		{1, strings.ToUpper(id), v1},
		{1, "00000000-0000-0000-0000-000000000000", strings.Replace(v1, id, "00000000-0000-0000-0000-000000000000", 1)},
		{1, id, strings.Replace(v1, "ada@", `ada\u0000@`, 1)},
		{2, id, strings.Replace(v2, "ada@", `ada\u0000@`, 1)},
		{2, id, strings.Replace(v2, `"Ada"`, `"A\u0000da"`, 1)},
		{1, id, strings.Replace(v1, "ada@", "ada\xff@", 1)},
		{1, id, strings.Replace(v1, `"quantity":2`, `"quantity":0`, 1)},
		{1, id, strings.Replace(v1, `"quantity":2`, `"quantity":101`, 1)},
		{1, id, strings.Replace(v1, `"quantity":2`, `"quantity":1e400`, 1)},
		{1, id, strings.Replace(v1, `"quantity":2`, `"quantity":-9223372036854775808`, 1)},
		{1, id, strings.Replace(v1, `2}]`, `2},{"book_id":"`+book+`","quantity":3}]`, 1)},
		{1, id, strings.Replace(v1, `"lines":[{`, `"lines":[{"book_id":"00000000-0000-0000-0000-000000000000","quantity":1},{`, 1)},
		{1, id, strings.Replace(v1, `"order_id"`, `"ORDER_ID"`, 1)},
		{1, id, strings.Replace(v1, `{"order_id"`, `{"order_id":"018f2b1e-0000-7000-8000-0000000000ab","order_id"`, 1)},
		{1, id, strings.Replace(v1, `"placed_at"`, `"shipped_at"`, 1)},
		{1, id, strings.Replace(v1, `[{"book_id"`, `null,[{"book_id"`, 1)},
		{1, id, `{"order_id":"` + id + `","customer_email":"ada@example.com","lines":[]}`},
		{1, id, `{"order_id":"` + id + `","customer_email":"ada@example.com","lines":[` + strings.Repeat(`{"book_id":"`+book+`","quantity":1},`, 60) + `{}]}`},
		{1, id, v1 + "]"},
		{1, id, "null"},
		{1, id, ""},
		{1, id, "\xff"},
	} {
		f.Add(seed.v, seed.subject, []byte(seed.data))
	}
	types := []string{contracts.OrderPlaced, contracts.OrderPlacedV2, contracts.StockReserved}
	f.Fuzz(func(t *testing.T, v uint8, subject string, data []byte) {
		env := event.Envelope{Type: types[int(v+2)%len(types)], Subject: subject, ID: "018f2b1e-0000-7000-8000-0000000000ff", Data: data}
		o, err := OrderOf(env)
		if err != nil {
			if reason, ok := event.IsPoison(err); !ok || reason == "" {
				t.Fatalf("%s %q: error not poison: %v", env.Type, data, err)
			}
			return
		}
		switch {
		case env.Type != contracts.OrderPlaced && env.Type != contracts.OrderPlacedV2:
			t.Fatalf("%s %q: accepted the type", env.Type, data)
		case o.ID == uuid.Nil || o.ID.String() != subject:
			t.Fatalf("%s %q: order %s for subject %q", env.Type, data, o.ID, subject)
		case o.CustomerEmail == "" || !httpapitest.Storable(o.CustomerEmail):
			t.Fatalf("%s %q: accepted customer email %q", env.Type, data, o.CustomerEmail)
		case len(o.Lines) < 1 || len(o.Lines) > contracts.MaxLines:
			t.Fatalf("%s %q: accepted %d lines", env.Type, data, len(o.Lines))
		}
		seen := map[uuid.UUID]bool{}
		for i, l := range o.Lines {
			switch {
			case l.BookID == uuid.Nil || seen[l.BookID]:
				t.Fatalf("%s %q: accepted lines[%d].book_id %s", env.Type, data, i, l.BookID)
			case l.Quantity < 1 || l.Quantity > contracts.MaxQuantity:
				t.Fatalf("%s %q: accepted lines[%d].quantity %d", env.Type, data, i, l.Quantity)
			}
			seen[l.BookID] = true
		}
	})
}
