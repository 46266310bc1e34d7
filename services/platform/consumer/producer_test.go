package consumer_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// A consumer takes an event only from its producer, under its own type: a delivery
// published by another broker user (its AMQP user-id, which the broker checks against
// the publisher's login, says so), or by one that set no user-id, or routed under a key
// other than its envelope's type or the type's copy to this queue (another queue's copy
// included), is dead-lettered at its first delivery and counted by reason, and never
// reaches the handler. The producer's own events around them are processed, under their
// type or as their copy to this queue (what a relay publishes).
func TestAnEventFromAnotherPublisherOrUnderAnotherKeyIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := newBatchRun(t)
	b.start(t)
	stranger := testenv.BrokerUser(t, b.amqpURL)

	_, first := message(t, map[string]any{"n": 1})
	sut.Publish(t, b.amqpURL, first)
	forged, byStranger := message(t, map[string]any{"n": 2})
	sut.Publish(t, stranger, byStranger)

	raw := func(amqpURL string, key string, m broker.Message) {
		t.Helper()
		ch := sut.Channel(t, amqpURL)
		if err := ch.QueueBind(testenv.ExampleQueue, key, sut.Topology.Exchange, false, nil); err != nil {
			t.Fatal(err)
		}
		m.Publishing.DeliveryMode = amqp.Persistent
		if err := ch.PublishWithContext(context.Background(), sut.Topology.Exchange, key, true, false, m.Publishing); err != nil {
			t.Fatal(err)
		}
	}
	anonymous, unsigned := message(t, map[string]any{"n": 3})
	raw(stranger, testenv.ExampleType, unsigned)
	misrouted, underAnotherKey := message(t, map[string]any{"n": 4})
	underAnotherKey.Publishing.UserId = testenv.Login(b.amqpURL) // the producer's, rightly
	raw(b.amqpURL, "example.other.v1", underAnotherKey)
	elsewhere, anotherQueuesCopy := message(t, map[string]any{"n": 5})
	anotherQueuesCopy.Publishing.UserId = testenv.Login(b.amqpURL)
	raw(b.amqpURL, broker.QueueKey(testenv.ExampleType, "example.elsewhere"), anotherQueuesCopy)
	_, ownCopy := message(t, map[string]any{"n": 6})
	ownCopy.Publishing.UserId = testenv.Login(b.amqpURL)
	raw(b.amqpURL, broker.QueueKey(testenv.ExampleType, testenv.ExampleQueue), ownCopy)
	_, last := message(t, map[string]any{"n": 7})
	sut.Publish(t, b.amqpURL, last)

	poison := map[string]string{forged.ID: event.ReasonProducer, anonymous.ID: event.ReasonProducer,
		misrouted.ID: event.ReasonRoutingKey, elsewhere.ID: event.ReasonRoutingKey}
	testenv.Eventually(t, 30*time.Second, "all seven messages handled: processed or dead-lettered", func() bool {
		return b.metric(t, "bookstore_consumer_processed_total")+
			float64(testenv.QueueDepth(t, b.amqpURL, testenv.ExampleQueue+".dlq")) == 7
	})
	if got := b.metric(t, "bookstore_consumer_processed_total"); got != 3 {
		t.Errorf("processed %v messages, want the producer's 3 alone", got)
	}
	for _, d := range sut.Drain(t, b.amqpURL, testenv.ExampleQueue+".dlq", 100*time.Millisecond) {
		if _, ok := poison[d.MessageId]; !ok {
			t.Errorf("message %s dead-lettered, want it processed", d.MessageId)
		}
	}
	queue := `queue="` + testenv.ExampleQueue + `"`
	for reason, want := range map[string]float64{event.ReasonProducer: 2, event.ReasonRoutingKey: 2} {
		if got := b.metric(t, "bookstore_consumer_poison_total", queue, `reason="`+reason+`"`); got != want {
			t.Errorf("poison{%s, reason=%s} = %v, want %v", queue, reason, got, want)
		}
	}
	_, _, singles := b.snapshot()
	for id := range poison {
		if singles[id] > 0 {
			t.Errorf("message %s (%s) reached the handler", id, poison[id])
		}
	}
}
