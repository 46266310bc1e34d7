package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// A publisher holds an event back while a queue bound to its type is missing, and
// publishes it as soon as the queue is there, even unbound (its consumer killed between
// its queue.declare and its queue.bind): the publisher binds the queue itself.
func TestAPublisherBindsTheQueuesItsEventsNeed(t *testing.T) {
	vhostURL := testenv.VHost(t)
	conn := broker.NewConn(vhostURL, "bind-publish")
	t.Cleanup(func() { _ = conn.Close() })
	pub := broker.NewPublisher(conn, testenv.ExampleTopology, 5*time.Second)
	t.Cleanup(pub.Close)
	ctx := context.Background()
	publish := func(id string) error { return pub.PublishBatch(ctx, []broker.Message{example(id)})[0] }

	err := publish("00000000-0000-7000-8000-000000000011")
	if !errors.Is(err, broker.ErrMissingQueue) || !broker.Unavailable(err) || !strings.Contains(err.Error(), testenv.ExampleQueue) {
		t.Fatalf("publish with the queue missing = %v, want an ErrMissingQueue naming %s", err, testenv.ExampleQueue)
	}
	unbound := testenv.ExampleTopology.Subset(testenv.ExampleQueue)
	unbound.Queues[0].Bindings = nil
	testenv.System{Topology: unbound}.Channel(t, vhostURL) // declares the queue, binds nothing
	if err := publish("00000000-0000-7000-8000-000000000012"); err != nil {
		t.Fatalf("publish once the queue exists, unbound = %v, want it bound and the event routed", err)
	}
	if got := sut.Drain(t, vhostURL, testenv.ExampleQueue, 200*time.Millisecond); len(got) != 1 {
		t.Errorf("the queue received %d messages, want the one published once it existed", len(got))
	}
}

// Two batches may be in flight on the publisher's one channel (Send, then Wait). A
// return is read by whichever Wait drains the channel first, and must still fail the
// message it belongs to: here the second batch's Wait, waited for first, reads the first
// batch's return (the broker sends it before it acks the second batch). Dropped there,
// the unroutable message would count as routed, and its outbox row be marked published.
func TestAReturnReadWhileAnotherBatchWaitsFailsItsOwnMessage(t *testing.T) {
	vhostURL := testenv.VHost(t)
	sut.Channel(t, vhostURL)
	conn := broker.NewConn(vhostURL, "two-in-flight")
	t.Cleanup(func() { _ = conn.Close() })
	pub := broker.NewPublisher(conn, testenv.ExampleTopology, 5*time.Second)
	t.Cleanup(pub.Close)
	ctx := context.Background()

	unroutable := broker.Message{RoutingKey: "nobody.listens.v1", Publishing: broker.EventPublishing("00000000-0000-7000-8000-000000000021", "nobody.listens.v1", "test", time.Now(), []byte(`{}`))}
	first := pub.Send(ctx, []broker.Message{unroutable})
	second := pub.Send(ctx, []broker.Message{example("00000000-0000-7000-8000-000000000022")})
	if errs := second.Wait(); errs[0] != nil {
		t.Fatalf("the routable message: %v, want it confirmed", errs[0])
	}
	if errs := first.Wait(); !errors.Is(errs[0], broker.ErrUnroutable) {
		t.Fatalf("the unroutable message sent first and waited for second: %v, want ErrUnroutable", errs[0])
	}
	if got := sut.Drain(t, vhostURL, testenv.ExampleQueue, 200*time.Millisecond); len(got) != 1 {
		t.Errorf("the queue received %d messages, want 1", len(got))
	}
}
