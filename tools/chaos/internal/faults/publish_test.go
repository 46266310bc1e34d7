package faults

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// A message the harness publishes straight to a queue that does not exist comes back,
// and is not taken for injected: the broker drops it and confirms it all the same, and a
// hopeless or poison message counted as injected would then never reach its DLQ. One to
// a queue that exists goes through, with nothing left over from the return before.
func TestAMessageToAMissingQueueIsNotTakenForPublished(t *testing.T) {
	m := NewMessages(&harness.System{AMQPURL: testenv.VHost(t)}, 1)
	defer m.Close()
	msg := amqp.Publishing{MessageId: "m-1", Body: []byte("{}")}
	if err := m.publish(t.Context(), "", "no-such-queue", msg); !errors.Is(err, errNoQueue) {
		t.Fatalf("publish to a missing queue: %v, want errNoQueue", err)
	}
	m.mu.Lock()
	ch, err := m.channel()
	if err == nil {
		_, err = ch.QueueDeclare("there", true, false, false, false, nil)
	}
	m.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.publish(t.Context(), "", "there", msg); err != nil {
		t.Fatalf("publish to a queue that exists: %v", err)
	}
	if n, err := m.readyCount("there"); err != nil || n != 1 {
		t.Errorf("the queue holds %d, %v; want the one message", n, err)
	}
}
