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

// A publisher sets its login as every message's AMQP user-id, which the broker checks
// against the connection's user: a consumer can tell who published each event.
func TestAPublisherSetsItsLoginAsEveryMessagesUserID(t *testing.T) {
	vhostURL := testenv.VHost(t)
	sut.Channel(t, vhostURL) // the queue, bound
	conn := broker.NewConn(vhostURL, "user-id")
	t.Cleanup(func() { _ = conn.Close() })
	pub := broker.NewPublisher(conn, testenv.ExampleTopology, 5*time.Second)
	t.Cleanup(pub.Close)
	if err := pub.PublishBatch(context.Background(), []broker.Message{example("00000000-0000-7000-8000-000000000021")})[0]; err != nil {
		t.Fatal(err)
	}
	e, _ := broker.ParseEndpoints(vhostURL)
	got := sut.Drain(t, vhostURL, testenv.ExampleQueue, 200*time.Millisecond)
	if len(got) != 1 || got[0].UserId == "" || got[0].UserId != e.Login() {
		t.Fatalf("the queue received %d messages, the first with user-id %q; want one with the login %q", len(got), got[0].UserId, e.Login())
	}
}
