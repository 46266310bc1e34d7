package notifications

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// A stock event's recipient is an address by the rule ordering's API and the provider
// apply (contracts.AddressProblem), and a rejection's reason is bounded text: otherwise
// notification would store a 50 MB recipient or reason in its record and send it on to
// the provider, which refuses it, and the record fails after the provider's answer
// instead of the event being dead-lettered unread.
func TestAStockEventsRecipientAndReasonObeyTheRulesOfTheHTTPSide(t *testing.T) {
	const id = "018f2b1e-0000-7000-8000-0000000000aa"
	data := func(email, reason string) json.RawMessage {
		m := map[string]any{"order_id": id, "customer_email": email, "lines": []any{}}
		if reason != "" {
			m["reason"] = reason
		}
		b, _ := json.Marshal(m)
		return b
	}
	cases := map[string]event.Envelope{
		"a 50 KB recipient":         {Type: contracts.StockReserved, Data: data(strings.Repeat("a", 50_000)+"@example.com", "")},
		"a recipient with a name":   {Type: contracts.StockReleased, Data: data("Ada <ada@example.com>", "")},
		"a recipient on an IP":      {Type: contracts.StockReserved, Data: data("ada@[127.0.0.1]", "")},
		"a recipient at localhost":  {Type: contracts.StockRejected, Data: data("ada@localhost", "insufficient stock")},
		"a 50 KB reason":            {Type: contracts.StockRejected, Data: data("ada@example.com", strings.Repeat("r", 50_000))},
		"a reason with a new line":  {Type: contracts.StockRejected, Data: data("ada@example.com", "no stock\r\nBcc: eve@example.com")},
		"a reason with a bidi mark": {Type: contracts.StockRejected, Data: data("ada@example.com", "no stock\u202e")},
	}
	for name, env := range cases {
		env.ID, env.Subject = "018f2b1e-0000-7000-8000-0000000000ff", id
		if _, err := emailFor(env); err == nil {
			t.Errorf("%s: an email was written, want poison", name)
		} else if reason, _ := event.IsPoison(err); reason != event.ReasonInvalidData {
			t.Errorf("%s: %v, want poison %s", name, err, event.ReasonInvalidData)
		}
	}
	ok := event.Envelope{ID: "018f2b1e-0000-7000-8000-0000000000ff", Subject: id, Type: contracts.StockRejected,
		Data: data("ada.lovelace+books@example.co.uk", "insufficient stock for 018f2b1e-0000-7000-8000-000000000001: 0 available, 1 wanted")}
	if _, err := emailFor(ok); err != nil {
		t.Errorf("a valid rejection: %v", err)
	}
}
