package orders

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

func decodePlaceOrder(body string) (PlaceOrderRequest, *httpapi.Problem) {
	var req PlaceOrderRequest
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	return req, httpapi.DecodeValid(r, &req)
}

// FuzzPlaceOrderRequestIsAcceptedOnlyWhenValid: whatever the body of POST /orders, the
// API answers a 400, 413 or 422 with a detail, never a 5xx, or takes an order that keeps
// every rule of docs/contracts.md, checked here without Valid's help: a plain email
// address of at most 254 characters, 1 to 50 lines of distinct canonical book ids, each
// quantity 1 to 100, every string storable. An accepted request, encoded again, is
// accepted as the same request.
func FuzzPlaceOrderRequestIsAcceptedOnlyWhenValid(f *testing.F) {
	const book = "018f2b1e-0000-7000-8000-000000000001"
	valid := `{"customer_email":"ada@example.com","lines":[{"book_id":"` + book + `","quantity":2}]}`
	for _, seed := range []string{
		valid,
		`{"customer_email":"a.b+c@sub.example.com","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000001","quantity":1},{"book_id":"018f2b1e-0000-7000-8000-000000000002","quantity":100}]}`,
		strings.Replace(valid, "ada@", `ada\u0000@`, 1),
		strings.Replace(valid, "ada@", "ada\xff@", 1),
		strings.Replace(valid, "ada@example.com", "Ada <ada@example.com>", 1),
		strings.Replace(valid, "ada@example.com", `\"ada\"@example.com`, 1),
		strings.Replace(valid, "ada@example.com", `ada@example.com\u00a0`, 1),
		strings.Replace(valid, "ada@example.com", `ada@[127.0.0.1]`, 1),
		strings.Replace(valid, "ada@example.com", strings.Repeat("a", 250)+"@b.cd", 1),
		strings.Replace(valid, `"lines"`, `"Lines"`, 1),
		strings.Replace(valid, `{"customer_email"`, `{"customer_email":"x@y.z","customer_email"`, 1),
		strings.Replace(valid, `"quantity":2`, `"quantity":1e400`, 1),
		strings.Replace(valid, `"quantity":2`, `"quantity":99999999999999999999`, 1),
		strings.Replace(valid, `"quantity":2`, `"quantity":2.5`, 1),
		strings.Replace(valid, `"quantity":2`, `"quantity":-0`, 1),
		strings.Replace(valid, `"quantity":2`, `"quantity":"2"`, 1),
		strings.Replace(valid, book, strings.ToUpper(book), 1),
		strings.Replace(valid, book, "{"+book+"}", 1),
		strings.Replace(valid, book, "urn:uuid:"+book, 1),
		strings.Replace(valid, book, strings.ReplaceAll(book, "-", ""), 1),
		strings.Replace(valid, `2}]`, `2},{"book_id":"`+book+`","quantity":3}]`, 1),
		valid + "]", valid + " {}", valid + "\x00",
		`{"customer_email":"ada@example.com","lines":[]}`,
		`{"customer_email":"ada@example.com","lines":null}`,
		`{"customer_email":"ada@example.com","lines":[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]}`,
		"", "null", "[]", "{}", `"x"`, "\xff", strings.Repeat("[", 5000),
		`{"customer_email":"ada@example.com","lines":[` + strings.Repeat(`{"book_id":"`+book+`","quantity":1},`, 5000) + `{}]}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, p := decodePlaceOrder(body)
		if p != nil {
			httpapitest.RequireClientProblem(t, body, p)
			return
		}
		if !httpapitest.PlainAddress(req.CustomerEmail) {
			t.Fatalf("%q: accepted customer_email %q", body, req.CustomerEmail)
		}
		if len(req.Lines) < 1 || len(req.Lines) > contracts.MaxLines {
			t.Fatalf("%q: accepted %d lines", body, len(req.Lines))
		}
		seen := map[string]bool{}
		for i, l := range req.Lines {
			id, err := uuid.Parse(l.BookID)
			switch {
			case err != nil || id.String() != strings.ToLower(l.BookID) || !httpapitest.Storable(l.BookID):
				t.Fatalf("%q: accepted lines[%d].book_id %q", body, i, l.BookID)
			case seen[id.String()]:
				t.Fatalf("%q: accepted book %s twice", body, id)
			case l.Quantity < 1 || l.Quantity > contracts.MaxQuantity:
				t.Fatalf("%q: accepted lines[%d].quantity %d", body, i, l.Quantity)
			}
			seen[id.String()] = true
		}
		_ = req.lines() // must not panic on an accepted request
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, p := decodePlaceOrder(string(again))
		if p != nil || fmt.Sprint(req2) != fmt.Sprint(req) {
			t.Fatalf("%q: accepted, but encoded again as %s: %+v, %+v", body, again, req2, p)
		}
	})
}

// FuzzStockOutcomeIsPoisonOrMatchesItsSubject: whatever the data of a stock event,
// ordering's decoder either refuses it as poison (the consumer dead-letters it) or hands
// over the order the subject names, with the outcome its type means; never a panic.
func FuzzStockOutcomeIsPoisonOrMatchesItsSubject(f *testing.F) {
	const order = "018f2b1e-0000-7000-8000-0000000000aa"
	reserved := `{"order_id":"` + order + `","customer_email":"ada@example.com","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000001","quantity":2}]}`
	rejected := strings.TrimSuffix(reserved, "}") + `,"reason":"insufficient stock"}`
	for _, seed := range []struct {
		typ           uint8
		subject, data string
	}{
		{0, order, reserved},
		{1, order, rejected},
		{0, order, rejected}, // a reason in a reservation: an unknown field
		{1, order, reserved},
		{2, order, reserved},
		{0, strings.ToUpper(order), reserved},
		{0, "018f2b1e-0000-7000-8000-0000000000ab", reserved},
		{0, "00000000-0000-0000-0000-000000000000", `{"order_id":"00000000-0000-0000-0000-000000000000"}`},
		{0, order, `{}`},
		{0, order, `null`},
		{0, order, `[]`},
		{0, order, strings.Replace(reserved, `"order_id"`, `"ORDER_ID"`, 1)},
		{0, order, strings.Replace(reserved, `{"order_id"`, `{"order_id":"018f2b1e-0000-7000-8000-0000000000ab","order_id"`, 1)},
		{0, order, reserved + "]"},
		{0, order, strings.Replace(reserved, "ada@", `ada\u0000@`, 1)},
		{0, order, strings.Replace(reserved, `"quantity":2`, `"quantity":1e400`, 1)},
		{0, order, "\xff"},
		{0, order, ""},
	} {
		f.Add(seed.typ, seed.subject, []byte(seed.data))
	}
	types := []string{contracts.StockReserved, contracts.StockRejected, contracts.OrderPlaced}
	f.Fuzz(func(t *testing.T, typ uint8, subject string, data []byte) {
		env := event.Envelope{Type: types[int(typ)%len(types)], Subject: subject, ID: "018f2b1e-0000-7000-8000-0000000000ff", Data: data}
		id, status, err := outcomeOf(env)
		if err != nil {
			if reason, ok := event.IsPoison(err); !ok || reason == "" {
				t.Fatalf("%s %q: error not poison: %v", env.Type, data, err)
			}
			return
		}
		want := map[string]Status{contracts.StockReserved: Confirmed, contracts.StockRejected: Rejected}[env.Type]
		switch {
		case want == "" || status != want:
			t.Fatalf("%s %q: status %q", env.Type, data, status)
		case id == uuid.Nil || id.String() != subject:
			t.Fatalf("%s %q: order %s for subject %q", env.Type, data, id, subject)
		}
	})
}
