package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// The tests of this file run on RabbitMQ 3.10 and 4.3 alike (TEST_AMQP_URL and
// TEST_RABBITMQ_MANAGEMENT_URL choose the broker). The first ones pin down what the
// broker does that the consumer's guarantees rest on; where the versions differ, a test
// reads the broker's version and asserts each version's behaviour. The last ones show the
// guarantees themselves.

// returnWays are the ways a delivery goes back to its queue unsettled: the consumer's own
// (basic.reject with requeue after a failure, the close of its channel at an outage or a
// shutdown) and the others a broker sees (basic.nack with requeue, a connection lost).
// uncountedSince is the first RabbitMQ release whose delivery limit does not count that
// way's returns, if any.
var returnWays = []struct {
	name           string
	uncountedSince testenv.RabbitMQVersion
	back           func(t *testing.T, conn *amqp.Connection, ch *amqp.Channel, d amqp.Delivery)
}{
	{"basic.nack requeue", testenv.RabbitMQVersion{Major: 4, Minor: 3}, func(t *testing.T, _ *amqp.Connection, _ *amqp.Channel, d amqp.Delivery) {
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}},
	{"basic.reject requeue", testenv.RabbitMQVersion{}, func(t *testing.T, _ *amqp.Connection, _ *amqp.Channel, d amqp.Delivery) {
		if err := d.Reject(true); err != nil {
			t.Fatal(err)
		}
	}},
	{"channel closed", testenv.RabbitMQVersion{}, func(t *testing.T, _ *amqp.Connection, ch *amqp.Channel, _ amqp.Delivery) {
		if err := ch.Close(); err != nil {
			t.Fatal(err)
		}
	}},
	{"connection closed", testenv.RabbitMQVersion{}, func(t *testing.T, conn *amqp.Connection, _ *amqp.Channel, _ amqp.Delivery) {
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
	}},
}

// receive takes the next delivery of queue on a connection and channel of its own, with
// a prefetch of one, and cancels the consumer before it returns: a message requeued then
// is not handed straight back to the same consumer.
func receive(t *testing.T, amqpURL, queue string) (*amqp.Connection, *amqp.Channel, amqp.Delivery) {
	t.Helper()
	conn, err := testenv.DialAMQP(t, amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "receive", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if err := ch.Cancel("receive", false); err != nil {
			t.Fatal(err)
		}
		return conn, ch, d
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery from %s within 10s", queue)
		return nil, nil, amqp.Delivery{}
	}
}

// Every way a delivery goes back to a quorum queue spends one of the message's
// deliveries, but for one: RabbitMQ 4.3 no longer counts a basic.nack with requeue
// (3.10 does). A basic.reject with requeue and a channel closed with the message unacked
// count on both. The consumer builds on that: a failure goes back by basic.reject and
// spends exactly one delivery, and an outage, which closes the channel, spends one of
// each message the consumer held, however long it lasts.
func TestEveryReturnToTheQueueSpendsOneDeliveryButANackOnRabbitMQ43(t *testing.T) {
	t.Parallel()
	version := testenv.RabbitMQ(t)
	for _, way := range returnWays {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			counted := way.uncountedSince == (testenv.RabbitMQVersion{}) ||
				!version.AtLeast(way.uncountedSince.Major, way.uncountedSince.Minor)
			amqpURL := testenv.VHost(t)
			env, m := message(t, map[string]any{"n": 1})
			sut.Publish(t, amqpURL, m)
			for returns := range int64(3) {
				conn, ch, d := receive(t, amqpURL, testenv.ExampleQueue)
				if d.MessageId != env.ID {
					t.Fatalf("delivery of %s, want %s", d.MessageId, env.ID)
				}
				want := returns
				if !counted {
					want = 0
				}
				if got := deliveryCount(d); got != want {
					t.Fatalf("RabbitMQ %s: after %d returns by %s, x-delivery-count = %d, want %d", version, returns, way.name, got, want)
				}
				if redelivered := returns > 0; d.Redelivered != redelivered {
					t.Errorf("RabbitMQ %s: after %d returns by %s, redelivered = %v", version, returns, way.name, d.Redelivered)
				}
				way.back(t, conn, ch, d)
			}
		})
	}
}

// A quorum queue declared without x-delivery-limit has none on RabbitMQ 3.10, and one of
// 20 on RabbitMQ 4.0: the 21st return dead-letters the message (or drops it, without a
// dead-letter exchange). Bookstore's queues set their own limit (broker.DeliveryLimit),
// and its dead-letter queues theirs (broker.DeadLetterDeliveryLimit) because of this.
func TestAQueueWithoutALimitOfItsOwnHasTwentyDeliveriesOnRabbitMQ4AndNoLimitOn310(t *testing.T) {
	t.Parallel()
	version := testenv.RabbitMQ(t)
	amqpURL := testenv.VHost(t)
	ch := sut.Channel(t, amqpURL)
	const queue = "unlimited"
	if _, err := ch.QueueDeclare(queue+".dlq", true, false, false, false, broker.DLQArgs()); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue+".dlq", queue, sut.Topology.DeadLetterExchange, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": sut.Topology.DeadLetterExchange, "x-dead-letter-routing-key": queue,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", queue, true, false, amqp.Publishing{MessageId: "m", DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	const returns = 21
	for i := range returns {
		_, rch, _ := receive(t, amqpURL, queue)
		if err := rch.Close(); err != nil {
			t.Fatal(err)
		}
		if i+1 < returns {
			testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the message back in its queue after return %d", i+1), func() bool {
				return testenv.QueueDepth(t, amqpURL, queue) == 1
			})
		}
	}
	if version.AtLeast(4, 0) {
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("RabbitMQ %s dead-letters the message at its 21st return", version), func() bool {
			return testenv.QueueDepth(t, amqpURL, queue+".dlq") == 1
		})
		d, ok, err := ch.Get(queue+".dlq", true)
		if err != nil || !ok {
			t.Fatalf("get from the DLQ: %v %v", ok, err)
		}
		if reason := d.Headers["x-first-death-reason"]; reason != "delivery_limit" {
			t.Errorf("x-first-death-reason = %v, want delivery_limit", reason)
		}
		return
	}
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("RabbitMQ %s keeps the message after 21 returns", version), func() bool {
		return testenv.QueueDepth(t, amqpURL, queue) == 1
	})
	if n := testenv.QueueDepth(t, amqpURL, queue+".dlq"); n != 0 {
		t.Errorf("RabbitMQ %s dead-lettered %d messages from a queue without a delivery limit", version, n)
	}
}

// A message that goes back to its quorum queue is delivered again before the messages
// behind it, those enqueued while it was out included, on 3.10 and on 4.0 alike,
// whichever way it went back: it does not go to the tail. A requeued failure is retried
// at once, which is why the consumer waits out a backoff before it requeues.
func TestAReturnedMessageIsDeliveredAgainBeforeTheMessagesBehindIt(t *testing.T) {
	t.Parallel()
	version := testenv.RabbitMQ(t)
	for _, way := range returnWays {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			amqpURL := testenv.VHost(t)
			var ids []string
			var msgs []broker.Message
			for i := range 3 {
				env, m := message(t, map[string]any{"n": i})
				ids, msgs = append(ids, env.ID), append(msgs, m)
			}
			sut.Publish(t, amqpURL, msgs[:2]...)
			conn, ch, d := receive(t, amqpURL, testenv.ExampleQueue)
			if d.MessageId != ids[0] {
				t.Fatalf("first delivery %s, want %s", d.MessageId, ids[0])
			}
			sut.Publish(t, amqpURL, msgs[2]) // enqueued while the first is out
			way.back(t, conn, ch, d)
			testenv.Eventually(t, 10*time.Second, "the returned message back in the queue", func() bool {
				return testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue) == 3
			})
			var got []string
			for _, d := range sut.Drain(t, amqpURL, testenv.ExampleQueue, 100*time.Millisecond) {
				got = append(got, d.MessageId)
			}
			if !slices.Equal(got, ids) {
				t.Errorf("RabbitMQ %s: order after a return by %s = %v, want %v (the returned one first)", version, way.name, got, ids)
			}
		})
	}
}

// The copy in a DLQ cannot be trusted to tell how often its message was delivered in its
// queue: RabbitMQ 3.10 sets its x-delivery-count afresh in the DLQ (0 at the copy's first
// basic.get), 4.0 hands it over as 1 whether the message was rejected at its first
// delivery or requeued once before, and 4.3 hands over the queue's count plus the copy's
// own delivery. A test that shows poison went to the DLQ at once counts the consumer's
// redeliveries instead of reading the copy.
func TestADeadLetteredCopyTellsItsQueuesDeliveriesOnlyOnRabbitMQ43(t *testing.T) {
	t.Parallel()
	version := testenv.RabbitMQ(t)
	for _, requeues := range []int64{0, 1} {
		t.Run(fmt.Sprintf("%d requeues before the reject", requeues), func(t *testing.T) {
			t.Parallel()
			amqpURL := testenv.VHost(t)
			_, m := message(t, map[string]any{"n": 1})
			sut.Publish(t, amqpURL, m)
			for range requeues {
				_, _, d := receive(t, amqpURL, testenv.ExampleQueue)
				if err := d.Reject(true); err != nil {
					t.Fatal(err)
				}
			}
			_, _, d := receive(t, amqpURL, testenv.ExampleQueue)
			if got := deliveryCount(d); got != requeues {
				t.Fatalf("x-delivery-count in the queue = %d, want %d", got, requeues)
			}
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "the message in the DLQ", func() bool {
				return testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue+".dlq") == 1
			})
			dead := sut.Drain(t, amqpURL, testenv.ExampleQueue+".dlq", 100*time.Millisecond)
			if len(dead) != 1 {
				t.Fatalf("DLQ held %d messages, want 1", len(dead))
			}
			var want int64
			switch {
			case version.AtLeast(4, 3):
				want = requeues + 1
			case version.AtLeast(4, 0):
				want = 1
			}
			if got := deliveryCount(dead[0]); got != want {
				t.Errorf("RabbitMQ %s: the DLQ copy of a message rejected after %d requeues has x-delivery-count %d, want %d", version, requeues, got, want)
			}
		})
	}
}

// notRedelivered fails the test unless the consumer whose /metrics is at metricsURL was
// handed no delivery twice: the proof, on either version, that the poison it rejected
// went to the DLQ at its first delivery (TestADeadLetteredCopyTellsItsQueuesDeliveriesOnlyOnRabbitMQ43).
func notRedelivered(t *testing.T, metricsURL string) {
	t.Helper()
	if got := testenv.Metric(t, metricsURL, "bookstore_consumer_redeliveries_total", `consumer="test"`); got != 0 {
		t.Errorf("the consumer was handed %v deliveries again: a message was returned to the queue", got)
	}
}

// A message whose handler keeps failing while every dependency is healthy spends one
// delivery per failure, no more: it reaches the handler exactly broker.DeliveryLimit+1
// times, with x-delivery-count 0, 1, 2, ... 50, and is then dead-lettered by the broker
// for its delivery limit, on either version; the message behind it is processed.
func TestTheDeliveryLimitCountsEachOfAMessagesOwnFailuresOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failing := h.runFailingOne(t, func(cfg *consumer.Config) { cfg.RetryBase, cfg.RetryMax = time.Millisecond, 5*time.Millisecond })
	next, nextBody := envelope(t, "order-next", map[string]int{"n": 2})
	h.publish(t, next.ID, next.Type, nextBody)

	testenv.Eventually(t, 60*time.Second, "the failing message dead-lettered", func() bool {
		return testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq") == 1
	})
	version := testenv.RabbitMQ(t)
	if calls := h.callsOf(failing.ID); calls != broker.DeliveryLimit+1 {
		t.Errorf("RabbitMQ %s: the failing message reached the handler %d times, want %d (one per delivery the limit allows)",
			version, calls, broker.DeliveryLimit+1)
	}
	counts := h.deliveryCounts(failing.ID)
	for i, c := range counts {
		if c != int64(i) {
			t.Fatalf("RabbitMQ %s: x-delivery-count of the deliveries = %v, want 0, 1, 2, ...: each failure spends one", version, counts)
		}
	}
	dead := sut.Drain(t, h.amqpURL, testenv.ExampleQueue+".dlq", 100*time.Millisecond)
	if len(dead) != 1 || dead[0].MessageId != failing.ID {
		t.Fatalf("DLQ = %d messages, want %s alone", len(dead), failing.ID)
	}
	if reason := dead[0].Headers["x-first-death-reason"]; reason != "delivery_limit" {
		t.Errorf("dead-lettered for %v, want delivery_limit", reason)
	}
	testenv.Eventually(t, 10*time.Second, "the message behind it processed", func() bool {
		return h.count(t, "SELECT count(*) FROM work") == 1
	})
}

// A broker that keeps handing back a message the consumer has seen fail more often than
// its own limit (here the queue allows 50 deliveries, the consumer 3 failures) does not
// keep it: the consumer dead-letters it itself at the next failure, on either version.
// This is the guard for a broker that stops counting a way of returning a message, as
// RabbitMQ 4.3 stopped counting basic.nack.
func TestAMessageFailingMoreOftenThanTheConsumerAllowsIsDeadLetteredByTheConsumer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failing := h.runFailingOne(t, func(cfg *consumer.Config) {
		cfg.RetryBase, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
		cfg.MaxFailures = 3
	})

	testenv.Eventually(t, 30*time.Second, "the failing message dead-lettered", func() bool {
		return testenv.QueueDepth(t, h.amqpURL, testenv.ExampleQueue+".dlq") == 1
	})
	version := testenv.RabbitMQ(t)
	if calls := h.callsOf(failing.ID); calls != 4 {
		t.Errorf("RabbitMQ %s: the failing message reached the handler %d times, want 4 (3 failures allowed, the 4th dead-letters)", version, calls)
	}
	dead := sut.Drain(t, h.amqpURL, testenv.ExampleQueue+".dlq", 100*time.Millisecond)
	if len(dead) != 1 || dead[0].MessageId != failing.ID {
		t.Fatalf("DLQ = %d messages, want %s alone", len(dead), failing.ID)
	}
	if reason := dead[0].Headers["x-first-death-reason"]; reason != "rejected" {
		t.Errorf("dead-lettered for %v, want rejected: by the consumer, not the broker's limit", reason)
	}
}

// runFailingOne runs the consumer with a handler that fails every time on one message,
// which it publishes and returns, and handles every other message as h.handle does.
func (h *harness) runFailingOne(t *testing.T, tune func(*consumer.Config)) event.Envelope {
	t.Helper()
	failing, body := envelope(t, "order-failing", map[string]int{"n": 1})
	h.runWith(t, func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		if env.ID != failing.ID {
			return h.handle(ctx, env)
		}
		h.callsMu.Lock()
		h.calls[env.ID]++
		h.callsMu.Unlock()
		return 0, errors.New("the handler fails on this message (simulated)")
	}, tune)
	h.publish(t, failing.ID, failing.Type, body)
	return failing
}
