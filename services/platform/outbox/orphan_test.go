package outbox_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// A NAT or load balancer between the relay and Postgres forgets the relay's idle
// connections: the one that holds its RELAY_ID lock and LISTENs, and the one on which it
// sleeps holding the wake locks. The relay sees them end; the server keeps both sessions,
// and their locks, until its TCP keepalive gives up on them (hours by default). The
// relay must not take its own orphaned session for a live twin: it publishes again
// within seconds, and its readiness never blames a twin meanwhile.
func TestARelayWhoseLockConnectionBrokeOnItsSideOnlyRelaysAgainWithinSeconds(t *testing.T) {
	direct, amqpURL, tel := setup(t)
	u, err := url.Parse(direct.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	pool := testenv.Pool(t, u.String())
	conn := broker.NewConn(amqpURL, "relay")
	t.Cleanup(func() { conn.Close() })
	// No poll: only a wake-up (a NOTIFY, or the listener's own once it holds the lock
	// again) runs a batch.
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 5*time.Second), tel,
		outbox.Config{ID: "relay", PollInterval: time.Hour, BackoffBase: 10 * time.Millisecond, OutageMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	published := func() int { return testenv.Count(t, direct, "SELECT count(*) FROM outbox WHERE state = 'published'") }
	listeners := func() int {
		return testenv.Count(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN outbox'")
	}
	// The sessions that hold advisory locks: asleep, the relay holds its id's lock on one
	// connection and the sleeper and wake locks on another.
	const holders = `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
	writeEvents(t, direct, testenv.ExampleType, "before", 1, 1)
	testenv.Eventually(t, 10*time.Second, "the first event published and the relay asleep holding the wake lock", func() bool {
		return published() == 1 && listeners() == 1 &&
			testenv.Count(t, direct, "SELECT count(DISTINCT pid) FROM ("+holders+") h") == 2
	})

	var orphans []int32
	rows, err := direct.Query(context.Background(), "SELECT DISTINCT pid FROM ("+holders+") h")
	if err != nil {
		t.Fatal(err)
	}
	orphans, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	// Both connections are matched by what they sent: the listener's LISTEN, the sleeper's lock.
	if n := proxy.OrphanMatching("LISTEN outbox") + proxy.OrphanMatching("outbox sleeper"); n != 2 {
		t.Fatalf("orphaned %d connections, want the relay's lock and wake connections", n)
	}
	const events = 3
	writeEvents(t, direct, testenv.ExampleType, "after", events, 1)
	var seen []string
	deadline := time.Now().Add(10 * time.Second)
	for published() < 1+events {
		if err := relay.Ready(context.Background()); err != nil && !slices.Contains(seen, err.Error()) {
			seen = append(seen, err.Error())
			if errors.Is(err, outbox.ErrTwin) {
				t.Errorf("Ready = %v: the relay took its own orphaned session for a twin", err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the events written after the relay's connections broke are still pending after 10 s; Ready said %q", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("Ready meanwhile: %q", seen)
	testenv.Eventually(t, 10*time.Second, "the orphaned sessions ended", func() bool {
		return testenv.Count(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", orphans) == 0
	})
}
