package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// A channel the broker closes in the middle of a batch is the channel's failure: the batch
// comes back unavailable, and the publisher publishes again on a fresh channel. The broker
// closes a channel on a message whose expiration is not a number (406 PRECONDITION_FAILED),
// between the batch's publishes and its confirms, as it would on any channel error.
func TestABatchWhoseChannelTheBrokerClosesComesBackUnavailableAndTheNextIsPublished(t *testing.T) {
	vhostURL := testenv.VHost(t)
	testenv.System{Topology: testenv.ExampleTopology}.Channel(t, vhostURL)
	conn := broker.NewConn(vhostURL, "closed-mid-batch")
	t.Cleanup(func() { _ = conn.Close() })
	// Closed only once the batch has returned: a batch that hangs holds the publisher's
	// lock, and Close would wait on it for good.
	pub := broker.NewPublisher(conn, testenv.ExampleTopology, 5*time.Second)

	bad := example("00000000-0000-7000-8000-000000000021")
	bad.Publishing.Expiration = "never"
	done := make(chan []error, 1)
	go func() {
		done <- pub.PublishBatch(context.Background(), []broker.Message{bad, example("00000000-0000-7000-8000-000000000022")})
	}()
	select {
	case errs := <-done:
		t.Cleanup(pub.Close)
		for i, err := range errs {
			if !broker.Unavailable(err) {
				t.Errorf("message %d of the batch whose channel closed: %v, want unavailable", i, err)
			}
		}
	case <-time.After(30 * time.Second): // six confirm timeouts: the batch never returned
		t.Fatal("PublishBatch did not return after the broker closed its channel")
	}
	if err := pub.PublishBatch(context.Background(), []broker.Message{example("00000000-0000-7000-8000-000000000023")})[0]; err != nil {
		t.Fatalf("the next batch, on a fresh channel: %v", err)
	}
}
