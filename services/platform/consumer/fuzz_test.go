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
		env, err := c.decode(amqp.Delivery{MessageId: messageID, ContentType: event.ContentType, Body: body})
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

// FuzzOnlyABoundedMessageOfTheEventsContentTypeIsDecoded: the gate before decoding lets
// through nothing larger than the limit and nothing whose content type is not the
// events', each refused with its own reason whatever the body holds, and no error it
// returns, whatever the message quotes, is longer than a log line should be.
func FuzzOnlyABoundedMessageOfTheEventsContentTypeIsDecoded(f *testing.F) {
	const limit = 512
	const id = "018f2b1e-0000-7000-8000-0000000000aa"
	body := `{"specversion":"1.0","id":"` + id + `","source":"shop/orders","type":"shop.order-placed.v1","subject":"o","time":"2026-11-29T21:00:00Z","datacontenttype":"application/json","sequence":"1","data":{"x":1}}`
	for _, seed := range []struct{ contentType, body string }{
		{event.ContentType, body},
		{"application/cloudevents+json; charset=utf-8", body},
		{"Application/CloudEvents+JSON", body},
		{"application/json", body},
		{"text/plain", body},
		{"", body},
		{"application/cloudevents+json; charset=latin1", body},
		{"application/cloudevents+json;", body},
		{event.ContentType, strings.Replace(body, `"x":1`, `"x":"`+strings.Repeat("a", limit)+`"`, 1)},
		{event.ContentType, strings.Replace(body, "shop.order-placed.v1", strings.Repeat("t", limit-len(body)), 1)},
		{strings.Repeat("x", 300), "{}"},
	} {
		f.Add(seed.contentType, []byte(seed.body))
	}
	c := &Consumer{cfg: Config{Types: []string{"shop.order-placed.v1"}, MaxMessageSize: limit}}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		_, err := c.decode(amqp.Delivery{ContentType: contentType, Body: body})
		reason, poison := event.IsPoison(err)
		switch {
		case err != nil && !poison:
			t.Fatalf("%q %q: error not poison: %v", contentType, body, err)
		case len(body) > limit && reason != event.ReasonTooLarge:
			t.Fatalf("%q: %d bytes over %d: %v, want %s", contentType, len(body), limit, err, event.ReasonTooLarge)
		case len(body) <= limit && !event.IsContentType(contentType) && reason != event.ReasonContentType:
			t.Fatalf("%q %q: %v, want %s", contentType, body, err, event.ReasonContentType)
		case err != nil && len(err.Error()) > event.MaxDetail+64:
			t.Fatalf("%q: an error of %d bytes: %.200s", contentType, len(err.Error()), err)
		}
	})
}
