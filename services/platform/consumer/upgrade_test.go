package consumer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// A broker whose dead-letter queue an earlier release declared, before the DLQs had a
// delivery limit or with the limit as a queue argument, starts the consumer all the same
// (a queue declared again with other arguments is refused, PRECONDITION_FAILED, and the
// consumer would never consume): the consumer keeps the DLQ it finds, parks poison in it,
// and the DLQ's limit comes from the virtual host's DeadLetterPolicy.
func TestAConsumerStartsOnABrokerWhoseDeadLetterQueueAnEarlierReleaseDeclared(t *testing.T) {
	t.Parallel()
	for name, args := range map[string]amqp.Table{
		"without a delivery limit":            {"x-queue-type": "quorum"},
		"with its delivery limit as argument": {"x-queue-type": "quorum", "x-delivery-limit": broker.DeadLetterDeliveryLimit},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			dlq := testenv.ExampleQueue + ".dlq"
			if _, err := h.ch.QueueDelete(dlq, false, false, false); err != nil {
				t.Fatal(err)
			}
			if _, err := h.ch.QueueDeclare(dlq, true, false, false, false, args); err != nil {
				t.Fatal(err)
			}
			if err := h.ch.QueueBind(dlq, testenv.ExampleQueue, sut.Topology.DeadLetterExchange, false, nil); err != nil {
				t.Fatal(err)
			}
			c := h.run(t)
			testenv.Eventually(t, 15*time.Second, "the consumer consuming", func() bool { return c.Ready(context.Background()) == nil })

			good, body := envelope(t, "order-1", map[string]int{"n": 1})
			h.publish(t, good.ID, good.Type, body)
			h.publish(t, "", testenv.ExampleType, []byte("not json at all"))
			testenv.Eventually(t, 10*time.Second, "the event processed", func() bool { return h.count(t, "SELECT count(*) FROM work") == 1 })
			testenv.Eventually(t, 10*time.Second, "the poison parked", func() bool { return testenv.QueueDepth(t, h.amqpURL, dlq) == 1 })

			if got := effectiveDeliveryLimit(t, h.amqpURL, dlq); got != broker.DeadLetterDeliveryLimit {
				t.Errorf("%s's policy gives it a delivery limit of %v, want %d", dlq, got, broker.DeadLetterDeliveryLimit)
			}
		})
	}
}

// effectiveDeliveryLimit is the delivery-limit the policy in force on queue sets, as the
// management API reports it; nil without one.
func effectiveDeliveryLimit(t *testing.T, amqpURL, queue string) any {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	var q struct {
		Definition map[string]any `json:"effective_policy_definition"`
	}
	m := broker.Management{URL: testenv.ManagementURL()}
	path := fmt.Sprintf("/api/queues/%s/%s", url.PathEscape(u.Path[1:]), url.PathEscape(queue))
	// The policy reaches a queue a moment after either was created.
	testenv.Eventually(t, 10*time.Second, "the queue's policy in force", func() bool {
		if err := m.Do(context.Background(), http.MethodGet, path, "", &q); err != nil {
			t.Fatal(err)
		}
		return q.Definition["delivery-limit"] != nil
	})
	if f, ok := q.Definition["delivery-limit"].(float64); ok {
		return int(f)
	}
	return q.Definition["delivery-limit"]
}
