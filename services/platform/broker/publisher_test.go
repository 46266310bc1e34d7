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

// A queue that appears while the publisher watches may not be bound yet: a passive
// declare sees queues, not bindings. Its events wait QueueSettle after it appeared, and
// are published from then on.
func TestAQueueThatAppearsIsUsedOnlyOnceItHasSettled(t *testing.T) {
	vhostURL := testenv.VHost(t)
	conn := broker.NewConn(vhostURL, "settle-publish")
	t.Cleanup(func() { _ = conn.Close() })
	pub := broker.NewPublisher(conn, testenv.ExampleTopology, 5*time.Second)
	t.Cleanup(pub.Close)
	ctx := context.Background()
	publish := func(id string) error { return pub.PublishBatch(ctx, []broker.Message{example(id)})[0] }

	err := publish("00000000-0000-7000-8000-000000000011")
	if !errors.Is(err, broker.ErrMissingQueue) || !broker.Unavailable(err) || !strings.Contains(err.Error(), testenv.ExampleQueue) {
		t.Fatalf("publish with the queue missing = %v, want an ErrMissingQueue naming %s", err, testenv.ExampleQueue)
	}
	sut.Channel(t, vhostURL) // declares the queue and binds it
	declared := time.Now()
	if err := publish("00000000-0000-7000-8000-000000000012"); !errors.Is(err, broker.ErrMissingQueue) {
		t.Fatalf("publish right after the queue appeared = %v, want ErrMissingQueue until it settles", err)
	}
	testenv.Eventually(t, 5*time.Second, "the queue settles", func() bool {
		return publish("00000000-0000-7000-8000-000000000013") == nil
	})
	if waited := time.Since(declared); waited < broker.QueueSettle {
		t.Errorf("published %v after the queue appeared, want at least %v", waited, broker.QueueSettle)
	}
	if got := sut.Drain(t, vhostURL, testenv.ExampleQueue, 200*time.Millisecond); len(got) != 1 {
		t.Errorf("the queue received %d messages, want the one published after it settled", len(got))
	}
}
