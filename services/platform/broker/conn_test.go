package broker_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// sut is the system under test, as testenv's helpers see it.
// The platform knows no system: its tests speak the example system's names.
var sut = testenv.System{Topology: testenv.ExampleTopology}

// alarmed returns a publisher on vhostURL whose connection runs through an AMQP-aware
// proxy, so the test can play a broker alarm on it.
func alarmed(t *testing.T, name string) (*testenv.Proxy, *broker.Conn, *broker.Publisher, string) {
	t.Helper()
	vhostURL := testenv.VHost(t)
	sut.Channel(t, vhostURL) // the example queue exists before anything is published
	u, err := url.Parse(vhostURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewAMQPProxy(t, u.Host)
	u.Host = proxy.Addr
	conn := broker.NewConn(u.String(), name)
	t.Cleanup(func() { _ = conn.Close() })
	pub := broker.NewPublisher(conn, testenv.ExampleTopology, 5*time.Second)
	t.Cleanup(pub.Close)
	if err := pub.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return proxy, conn, pub, vhostURL
}

func example(id string) broker.Message {
	return broker.Message{RoutingKey: testenv.ExampleType, Publishing: broker.EventPublishing(id, testenv.ExampleType, "test", time.Now(), []byte(`{}`))}
}

// While the broker blocks a connection, the publisher fails fast and says why; when the
// broker unblocks it, publishing resumes on the same connection.
func TestABlockedPublisherFailsFastUntilTheBrokerUnblocksIt(t *testing.T) {
	proxy, conn, pub, _ := alarmed(t, "blocked-publish")
	ctx := context.Background()
	if n := proxy.BlockAMQP("blocked-publish", "low on memory"); n != 1 {
		t.Fatalf("blocked %d connections, want 1", n)
	}
	testenv.Eventually(t, 5*time.Second, "the publisher hears the alarm", func() bool { return conn.Blocked() != "" })
	if err := pub.Ready(ctx); !broker.Unavailable(err) {
		t.Fatalf("Ready while blocked = %v, want a broker.ErrUnavailable", err)
	}
	if err := conn.Ping(ctx); !broker.Unavailable(err) {
		t.Fatalf("Ping while blocked = %v, want a broker.ErrUnavailable", err)
	}
	proxy.UnblockAMQP("blocked-publish")
	testenv.Eventually(t, 5*time.Second, "the publisher hears the alarm end", func() bool { return conn.Blocked() == "" })
	if errs := pub.PublishBatch(ctx, []broker.Message{example("00000000-0000-7000-8000-000000000001")}); errs[0] != nil {
		t.Fatalf("publish after the alarm: %v", errs[0])
	}
}

// A connection that closes while the broker has it blocked takes its blocked state with
// it: no "unblocked" ever arrives for a closed connection, and a broker restart during an
// alarm is the usual way out of one. The next publish redials and goes through.
func TestAPublisherWhoseBlockedConnectionDropsRedialsAndPublishes(t *testing.T) {
	proxy, conn, pub, vhostURL := alarmed(t, "dropped-publish")
	ctx := context.Background()
	proxy.BlockAMQP("dropped-publish", "low on memory")
	testenv.Eventually(t, 5*time.Second, "the publisher hears the alarm", func() bool { return conn.Blocked() != "" })
	if n := proxy.CutMatching("dropped-publish"); n != 1 {
		t.Fatalf("dropped %d connections, want 1", n)
	}
	// The broker stays reachable throughout: only the blocked connection is gone.
	testenv.Eventually(t, 10*time.Second, "the publisher redials once its blocked connection has closed", func() bool {
		return pub.Ready(ctx) == nil
	})
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("Ping after the redial: %v", err)
	}
	if errs := pub.PublishBatch(ctx, []broker.Message{example("00000000-0000-7000-8000-000000000002")}); errs[0] != nil {
		t.Fatalf("publish after the redial: %v", errs[0])
	}
	got := sut.Drain(t, vhostURL, testenv.ExampleQueue, 200*time.Millisecond)
	if len(got) != 1 || got[0].MessageId != "00000000-0000-7000-8000-000000000002" {
		t.Fatalf("the queue holds %d messages, want the one published after the redial", len(got))
	}
}
