package outbox_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// The relay's database URL lists the primary (here a proxy) and then the host a failover
// promotes. When the primary dies, the relay's long-lived LISTEN connection (which also
// holds its RELAY_ID lock) dies with it; it must come back by itself through the next
// host, or the relay would relay nothing more: with a poll as slow as this one, only a
// notification on a new listener publishes the event written after the failover.
func TestTheRelaysListenerReconnectsThroughTheNextHostAfterThePrimaryDies(t *testing.T) {
	direct, amqpURL, tel := setup(t)
	u, err := url.Parse(direct.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	primary := testenv.NewProxy(t, u.Host)
	u.Host = primary.Addr + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	pool := testenv.Pool(t, u.String())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := consumeAll(t, ctx, amqpURL, testenv.ExampleQueue)
	conn := broker.NewConn(amqpURL, "relay")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 5*time.Second), tel,
		outbox.Config{ID: "relay", PollInterval: time.Hour, BackoffBase: 10 * time.Millisecond, OutageMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)

	writeEvents(t, direct, testenv.ExampleType, "before", 1, 1)
	testenv.Eventually(t, 10*time.Second, "the event before the failover published", func() bool { return got.distinct() == 1 })
	if n := testenv.Count(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN outbox'"); n != 1 {
		t.Fatalf("%d listeners, want the relay's one", n)
	}

	primary.Cut() // the primary dies
	writeEvents(t, direct, testenv.ExampleType, "after", 1, 1)
	testenv.Eventually(t, 30*time.Second, "the event after the failover published", func() bool { return got.distinct() == 2 })
}
