package consumer_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// A message larger than the consumer's limit, or of a content type other than the
// events', is dead-lettered at its first delivery and counted by queue and reason, and
// never reaches a handler: neither its size nor its bytes read as JSON spend anything
// past the gate. The valid messages around it are processed.
func TestAnOversizedOrNonJSONMessageIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	b := newBatchRun(t)
	b.start(t)

	_, first := message(t, map[string]any{"n": 1})
	big, oversized := message(t, map[string]any{"email": strings.Repeat("a", consumer.DefaultMaxMessageSize) + "@example.com"})
	plain, textPlain := message(t, map[string]any{"n": 2})
	textPlain.Publishing.ContentType = "text/plain"
	none, untyped := message(t, map[string]any{"n": 3})
	untyped.Publishing.ContentType = ""
	_, last := message(t, map[string]any{"n": 4})
	sut.PublishPoison(t, b.amqpURL, first, oversized, textPlain, untyped, last)
	poison := map[string]string{big.ID: event.ReasonTooLarge, plain.ID: event.ReasonContentType, none.ID: event.ReasonContentType}

	testenv.Eventually(t, 30*time.Second, "all five messages handled: processed or dead-lettered", func() bool {
		return b.metric(t, "bookstore_consumer_processed_total")+
			float64(testenv.QueueDepth(t, b.amqpURL, testenv.ExampleQueue+".dlq")) == 5
	})
	if got := b.metric(t, "bookstore_consumer_processed_total"); got != 2 {
		t.Errorf("processed %v messages, want the 2 valid ones alone", got)
	}
	for _, d := range sut.Drain(t, b.amqpURL, testenv.ExampleQueue+".dlq", 100*time.Millisecond) {
		if _, ok := poison[d.MessageId]; !ok {
			t.Errorf("message %s dead-lettered, want it processed", d.MessageId)
		}
	}
	notRedelivered(t, b.metrics)
	queue := `queue="` + testenv.ExampleQueue + `"`
	if got := b.metric(t, "bookstore_consumer_poison_total", queue, `reason="`+event.ReasonTooLarge+`"`); got != 1 {
		t.Errorf("poison{%s, reason=%s} = %v, want 1", queue, event.ReasonTooLarge, got)
	}
	if got := b.metric(t, "bookstore_consumer_poison_total", queue, `reason="`+event.ReasonContentType+`"`); got != 2 {
		t.Errorf("poison{%s, reason=%s} = %v, want 2", queue, event.ReasonContentType, got)
	}
	batches, _, singles := b.snapshot()
	for id := range poison {
		if singles[id] > 0 || slices.ContainsFunc(batches, func(ids []string) bool { return slices.Contains(ids, id) }) {
			t.Errorf("message %s (%s) reached a handler", id, poison[id])
		}
	}
}

// The limit is the consumer's to set: a message within the default is poison above a
// smaller one.
func TestTheMessageSizeLimitIsConfigurable(t *testing.T) {
	t.Parallel()
	b := newBatchRun(t)
	b.start(t, func(c *consumer.Config) { c.MaxMessageSize = 1024 })
	small, fits := message(t, map[string]any{"n": 1})
	big, over := message(t, map[string]any{"text": strings.Repeat("a", 1024)})
	sut.PublishPoison(t, b.amqpURL, fits, over)
	testenv.Eventually(t, 30*time.Second, "the small message processed and the big one dead-lettered", func() bool {
		return b.metric(t, "bookstore_consumer_processed_total") == 1 &&
			testenv.QueueDepth(t, b.amqpURL, testenv.ExampleQueue+".dlq") == 1
	})
	dead := sut.Drain(t, b.amqpURL, testenv.ExampleQueue+".dlq", 100*time.Millisecond)
	if len(dead) != 1 || dead[0].MessageId != big.ID {
		t.Errorf("DLQ holds %d messages, want %s (over 1 KiB) alone, not %s", len(dead), big.ID, small.ID)
	}
}
