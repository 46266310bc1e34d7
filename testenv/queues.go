package testenv

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// The example system of the platform's own tests: one queue, bound to one event type,
// under names no real system uses.
const (
	ExampleType  = "example.thing-happened.v1"
	ExampleQueue = "example.things"
)

// ExampleTopology is the example system's topology.
var ExampleTopology = broker.Topology{
	Exchange:           "example.events",
	DeadLetterExchange: "example.dlx",
	Queues:             []broker.Queue{{Name: ExampleQueue, Bindings: []string{ExampleType}}},
}

// ExampleTwoQueues is the example system with its event type bound to two queues, as
// Bookstore's stock events are bound to ordering's queue and to notification's.
var ExampleTwoQueues = broker.Topology{
	Exchange:           ExampleTopology.Exchange,
	DeadLetterExchange: ExampleTopology.DeadLetterExchange,
	Queues: []broker.Queue{
		{Name: "example.first", Bindings: []string{ExampleType}},
		{Name: "example.second", Bindings: []string{ExampleType}},
	},
}

// Channel opens a channel on the vhost at amqpURL with s.Topology declared, so a test can
// publish or read before the service under test has declared it itself. The connection
// closes when the test ends.
func (s System) Channel(t testing.TB, amqpURL string) *amqp.Channel {
	t.Helper()
	conn, ch := s.dial(t, amqpURL)
	t.Cleanup(func() { _ = conn.Close() })
	return ch
}

// Publish publishes msgs to s.Topology's exchange of the vhost at amqpURL as a relay
// does (persistent, mandatory, with publisher confirms), and returns once the broker has
// confirmed every one. A message the broker nacks is published again after a backoff,
// as the relay publishes again a row whose publish failed: a quorum queue declared a
// moment ago, on a machine loaded by other tests, refuses messages until it has a leader
// (the test then saw "broker nacked the message"). A message no queue is bound for fails
// the test, and so does one still refused after PublishTimeout.
//
// A message of an event type of s.Contracts must be one: a CloudEvent whose envelope
// and data match the type's schema, with the AMQP properties the contract sets
// (CheckEvent). A test that publishes a malformed message on purpose, to see it
// dead-lettered, uses PublishPoison.
func (s System) Publish(t testing.TB, amqpURL string, msgs ...broker.Message) {
	t.Helper()
	if s.Contracts != nil {
		for _, m := range msgs {
			if s.Contracts.IsEvent(m.RoutingKey) || s.Contracts.IsEvent(m.Publishing.Type) {
				s.CheckEvent(t, m.Publishing)
			}
		}
	}
	s.publish(t, amqpURL, msgs...)
}

// PublishPoison is Publish without the check of the contracts: for the malformed message
// a test publishes on purpose (unknown fields, a wrong id, data out of range).
func (s System) PublishPoison(t testing.TB, amqpURL string, msgs ...broker.Message) {
	t.Helper()
	s.publish(t, amqpURL, msgs...)
}

// CheckEvent fails the test unless msg is an event of s.Contracts: for Bookstore a
// CloudEvent by the CloudEvents Go SDK, its envelope and data valid by api/schemas, its
// content type, message_id and type those of the envelope. Use it on every event a test
// captures from a service.
func (s System) CheckEvent(t testing.TB, msg amqp.Publishing) {
	t.Helper()
	if s.Contracts == nil {
		t.Fatal("testenv.System has no Contracts: give the test package's System its contracts, beside its Topology")
	}
	if err := s.Contracts.CheckMessage(msg.ContentType, msg.MessageId, msg.Type, msg.Body); err != nil {
		t.Errorf("event %s (%s) breaks the contracts: %v", msg.MessageId, msg.Type, err)
	}
}

// CheckDelivery is CheckEvent for a message a test took from a queue.
func (s System) CheckDelivery(t testing.TB, d amqp.Delivery) {
	t.Helper()
	s.CheckEvent(t, amqp.Publishing{ContentType: d.ContentType, MessageId: d.MessageId, Type: d.Type, Body: d.Body})
}

func (s System) publish(t testing.TB, amqpURL string, msgs ...broker.Message) {
	t.Helper()
	conn, ch := s.dial(t, amqpURL)
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("publish: confirm mode: %v", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, len(msgs)))
	ctx, cancel := context.WithTimeout(context.Background(), PublishTimeout)
	defer cancel()
	pending := msgs
	for attempt := 1; len(pending) > 0; attempt++ {
		if attempt > 1 && !backoff.Sleep(ctx, backoff.Delay(50*time.Millisecond, time.Second, attempt-1)) {
			t.Fatalf("publish: %d of %d messages still nacked after %v (first %s)", len(pending), len(msgs), PublishTimeout, pending[0].Publishing.MessageId)
		}
		confirms := make([]*amqp.DeferredConfirmation, len(pending))
		for i, m := range pending {
			m.Publishing.DeliveryMode = amqp.Persistent
			if m.Publishing.UserId == "" {
				m.Publishing.UserId = Login(amqpURL) // as broker.Publisher signs what it publishes
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, s.Topology.Exchange, m.RoutingKey, true, false, m.Publishing)
			if err != nil {
				t.Fatalf("publish %s: %v", m.Publishing.MessageId, err)
			}
			confirms[i] = dc
		}
		var nacked []broker.Message
		for i, dc := range confirms {
			acked, err := dc.WaitContext(ctx)
			if err != nil {
				t.Fatalf("publish %s: no confirm: %v", pending[i].Publishing.MessageId, err)
			}
			if !acked {
				nacked = append(nacked, pending[i])
			}
		}
		// The broker sends a return before the confirm of its message, so every return of
		// this round is in the channel by now.
		select {
		case r := <-returns:
			t.Fatalf("publish %s: unroutable (%s): no queue is bound for %s", r.MessageId, r.ReplyText, r.RoutingKey)
		default:
		}
		if len(nacked) > 0 {
			t.Logf("publish: the broker nacked %d of %d messages; publishing them again", len(nacked), len(pending))
		}
		pending = nacked
	}
}

// PublishTimeout bounds how long Publish keeps publishing again what the broker nacks.
const PublishTimeout = 60 * time.Second

// Drain takes every message now in queue (acknowledging it), waiting up to quiet for
// more to arrive after each one. s.Topology is declared first, so a queue of the system
// exists to be read.
func (s System) Drain(t testing.TB, amqpURL, queue string, quiet time.Duration) []amqp.Delivery {
	t.Helper()
	conn, ch := s.dial(t, amqpURL)
	defer conn.Close()
	var out []amqp.Delivery
	deadline := time.Now().Add(quiet)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("drain %s: %v", queue, err)
		}
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		out = append(out, d)
		deadline = time.Now().Add(quiet)
	}
	return out
}

func (s System) dial(t testing.TB, amqpURL string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := DialAMQP(t, amqpURL)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		t.Fatalf("open a channel: %v", err)
	}
	if err := s.Topology.Declare(ch, conn.Channel); err != nil {
		_ = conn.Close()
		t.Fatalf("declare the topology (the test package's testenv.System): %v", err)
	}
	return conn, ch
}

// Declare declares topology on the vhost at amqpURL as a consuming service declares its
// own (broker.Topology.Declare), on a connection of its own, and fails the test if the
// broker refuses.
func Declare(t testing.TB, amqpURL string, topology broker.Topology) {
	t.Helper()
	conn, err := DialAMQP(t, amqpURL)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open a channel: %v", err)
	}
	if err := topology.Declare(ch, conn.Channel); err != nil {
		t.Fatalf("declare the topology: %v", err)
	}
}
