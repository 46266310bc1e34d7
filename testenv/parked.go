package testenv

import (
	"bytes"
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// Command runs a service's run function as a one-shot command (args such as "dlq",
// "replay"), with env as its whole environment, and returns what it printed. The command
// is expected to end by itself; it is given a minute.
func Command(t testing.TB, run RunFunc, env map[string]string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, args, func(k string) string { return env[k] }, &out)
	return out.String(), err
}

// PutInDLQ publishes msgs straight into queue's dead-letter queue, as if the queue had
// dead-lettered them, and waits for the broker's confirm of each.
func (s System) PutInDLQ(t testing.TB, amqpURL, queue string, msgs ...amqp.Publishing) {
	t.Helper()
	ch := s.Channel(t, amqpURL)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, msg := range msgs {
		msg.DeliveryMode = amqp.Persistent
		publishConfirmed(t, ch, broker.Queue{Name: queue}.DLQ(), msg)
	}
}

// publishConfirmed publishes msg to queue through the default exchange on ch (in confirm
// mode), again after a backoff while the broker nacks it, as Publish does.
func publishConfirmed(t testing.TB, ch *amqp.Channel, queue string, msg amqp.Publishing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), PublishTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
		if err != nil {
			t.Fatalf("publish to %s: %v", queue, err)
		}
		acked, err := dc.WaitContext(ctx)
		if err != nil {
			t.Fatalf("publish to %s: no confirm: %v", queue, err)
		}
		if acked {
			return
		}
		if !backoff.Sleep(ctx, backoff.Delay(50*time.Millisecond, time.Second, attempt)) {
			t.Fatalf("publish to %s: still nacked after %v", queue, PublishTimeout)
		}
	}
}

// ReadAll takes every message now in queue, in order, and acknowledges it. It puts a
// marker at the queue's tail and reads up to it, so whatever reached the queue before the
// call is counted, with no guess at how long to wait for a late copy.
func (s System) ReadAll(t testing.TB, amqpURL, queue string) []amqp.Delivery {
	t.Helper()
	ch := s.Channel(t, amqpURL)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	marker := "testenv.ReadAll-marker-" + Name("m")
	publishConfirmed(t, ch, queue, amqp.Publishing{MessageId: marker})
	var out []amqp.Delivery
	Eventually(t, 10*time.Second, "the marker at the tail of "+queue, func() bool {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				t.Fatalf("read %s: %v", queue, err)
			}
			if !ok {
				return false
			}
			if d.MessageId == marker {
				return true
			}
			out = append(out, d)
		}
	})
	return out
}
