package testenv

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// Channel opens a channel on the vhost at amqpURL with the contracts' exchanges and
// queues declared, so a test can publish or read before the service under test has
// declared them itself. The connection closes when the test ends.
func Channel(t testing.TB, amqpURL string) *amqp.Channel {
	t.Helper()
	conn, ch := dial(t, amqpURL)
	t.Cleanup(func() { _ = conn.Close() })
	return ch
}

// Drain takes every message now in queue (acknowledging it), waiting up to quiet for
// more to arrive after each one. The contracts' topology is declared first, so a queue of
// the contracts exists to be read.
func Drain(t testing.TB, amqpURL, queue string, quiet time.Duration) []amqp.Delivery {
	t.Helper()
	conn, ch := dial(t, amqpURL)
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

func dial(t testing.TB, amqpURL string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		t.Fatalf("open a channel: %v", err)
	}
	if err := broker.DeclareTopology(ch); err != nil {
		_ = conn.Close()
		t.Fatalf("declare the topology: %v", err)
	}
	return conn, ch
}
