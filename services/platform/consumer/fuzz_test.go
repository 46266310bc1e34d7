package consumer

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/event"
)

// FuzzDeliveryIsAKnownEventOrPoison: whatever a queue delivers (any body, any AMQP
// message_id), the consumer's decode does not panic, and either hands the handler an
// event of a type it knows whose id is the message_id (when there is one), or returns
// poison with a reason, which the consumer dead-letters at the first delivery.
func FuzzDeliveryIsAKnownEventOrPoison(f *testing.F) {
	const id = "018f2b1e-0000-7000-8000-0000000000aa"
	body := `{"specversion":"1.0","id":"` + id + `","source":"shop/orders","type":"shop.order-placed.v1","subject":"o","time":"2026-11-29T21:00:00Z","datacontenttype":"application/json","sequence":"1","data":{"x":1}}`
	for _, seed := range []struct{ messageID, body string }{
		{id, body},
		{"", body},
		{strings.ToUpper(id), body},
		{"018f2b1e-0000-7000-8000-0000000000ab", body},
		{id, strings.Replace(body, "shop.order-placed.v1", "shop.order-placed.v9", 1)},
		{id, body + "]"},
		{id, strings.Replace(body, `"id"`, `"Id"`, 1)},
		{id, strings.Replace(body, `"data":{"x":1}`, `"data":null`, 1)},
		{id, strings.Replace(body, `"subject":"o"`, `"subject":"o\u0000"`, 1)},
		{id, "\xff"},
		{id, ""},
		{id, "null"},
	} {
		f.Add(seed.messageID, []byte(seed.body))
	}
	c := &Consumer{cfg: Config{Types: []string{"shop.order-placed.v1", "shop.order-shipped.v1"}}}
	f.Fuzz(func(t *testing.T, messageID string, body []byte) {
		env, err := c.decode(amqp.Delivery{MessageId: messageID, Body: body})
		if err != nil {
			if reason, ok := event.IsPoison(err); !ok || reason == "" {
				t.Fatalf("%q %q: error not poison: %v", messageID, body, err)
			}
			return
		}
		switch {
		case env.Type != "shop.order-placed.v1" && env.Type != "shop.order-shipped.v1":
			t.Fatalf("%q %q: handed over type %q", messageID, body, env.Type)
		case messageID != "" && messageID != env.ID:
			t.Fatalf("%q %q: handed over event %s under message_id %q", messageID, body, env.ID, messageID)
		case env.UUID().String() != env.ID:
			t.Fatalf("%q %q: handed over id %q", messageID, body, env.ID)
		}
	})
}
