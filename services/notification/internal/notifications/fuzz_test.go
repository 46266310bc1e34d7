package notifications

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// FuzzStockEventIsPoisonOrAStorableEmail: whatever the data of a stock event,
// notification's decoder either refuses it as poison (the consumer dead-letters it) or
// hands over the email it asks for: for the order the subject names, of the kind the
// type means, to an address by contracts.AddressProblem (the rule ordering applied), with
// a recipient, subject and text the record can store.
// Never a panic, and never an email whose record could not be written: that error would
// be retried until the delivery limit instead of dead-lettered at once.
func FuzzStockEventIsPoisonOrAStorableEmail(f *testing.F) {
	const id = "018f2b1e-0000-7000-8000-0000000000aa"
	reserved := `{"order_id":"` + id + `","customer_email":"ada@example.com","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000001","quantity":2}]}`
	rejected := strings.TrimSuffix(reserved, "}") + `,"reason":"insufficient stock"}`
	for _, seed := range []struct {
		typ           uint8
		subject, data string
	}{
		{0, id, reserved},
		{1, id, rejected},
		{1, id, reserved},
		{0, id, rejected}, // a reason in a reservation: an unknown field
		{2, id, reserved},
		{0, "018f2b1e-0000-7000-8000-0000000000ab", reserved},
		{0, strings.ToUpper(id), reserved},
		{0, id, strings.Replace(reserved, "ada@example.com", "", 1)},
		{0, id, strings.Replace(reserved, "ada@", `ada\u0000@`, 1)},
		{1, id, strings.Replace(rejected, "insufficient", `in\u0000sufficient`, 1)},
		{0, id, strings.Replace(reserved, "ada@", "ada\xff@", 1)},
		{0, id, strings.Replace(reserved, "ada@example.com", "ada@ex\u0430mple.com", 1)},
		{0, id, strings.Replace(reserved, "ada@example.com", "ada@127.0.0.1.nip.io", 1)},
		{0, id, strings.Replace(reserved, `"quantity":2`, `"quantity":-99999999999`, 1)},
		{0, id, strings.Replace(reserved, `"quantity":2`, `"quantity":1e400`, 1)},
		{0, id, strings.Replace(reserved, `"lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000001","quantity":2}]`, `"lines":null`, 1)},
		{0, id, strings.Replace(reserved, `"order_id"`, `"Order_Id"`, 1)},
		{0, id, strings.Replace(reserved, `{"order_id"`, `{"order_id":"018f2b1e-0000-7000-8000-0000000000ab","order_id"`, 1)},
		{0, id, reserved + "]"},
		{0, id, `{"order_id":"` + id + `","customer_email":"ada@example.com","lines":[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]}`},
		{0, id, "null"},
		{0, id, ""},
		{0, id, "\xff"},
	} {
		f.Add(seed.typ, seed.subject, []byte(seed.data))
	}
	types := []string{contracts.StockReserved, contracts.StockRejected, contracts.OrderPlaced}
	f.Fuzz(func(t *testing.T, typ uint8, subject string, data []byte) {
		env := event.Envelope{Type: types[int(typ)%len(types)], Subject: subject, ID: "018f2b1e-0000-7000-8000-0000000000ff", Data: data}
		e, err := emailFor(env)
		if err != nil {
			if reason, ok := event.IsPoison(err); !ok || reason == "" {
				t.Fatalf("%s %q: error not poison: %v", env.Type, data, err)
			}
			return
		}
		want := map[string]Kind{contracts.StockReserved: OrderConfirmed, contracts.StockRejected: OrderRejected}[env.Type]
		switch {
		case want == "" || e.kind != want:
			t.Fatalf("%s %q: kind %q", env.Type, data, e.kind)
		case e.orderID == uuid.Nil || e.orderID.String() != subject:
			t.Fatalf("%s %q: order %s for subject %q", env.Type, data, e.orderID, subject)
		case e.message.To == "" || !httpapitest.Storable(e.message.To) || contracts.AddressProblem(e.message.To) != "":
			t.Fatalf("%s %q: accepted recipient %q", env.Type, data, e.message.To)
		case e.message.Subject == "" || !httpapitest.Storable(e.message.Subject) || strings.ContainsAny(e.message.Subject, "\r\n"):
			t.Fatalf("%s %q: subject %q", env.Type, data, e.message.Subject)
		case e.message.Text == "" || !httpapitest.Storable(e.message.Text):
			t.Fatalf("%s %q: text %q", env.Type, data, e.message.Text)
		case !httpapitest.Storable(IdempotencyKey(e.orderID, e.kind)):
			t.Fatalf("%s %q: key %q", env.Type, data, IdempotencyKey(e.orderID, e.kind))
		}
	})
}
