package deadletter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/ops/deadletter"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// metrics serves the gauge of conn's queues the way a service does, and returns the
// /metrics lines of bookstore_consumer_dead_letters.
func gaugeLines(t *testing.T, conn *broker.Conn, queues ...string) func() []string {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "test", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.ObserveDeadLetters(tel, conn, queues...); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tel.Metrics)
	t.Cleanup(srv.Close)
	return func() []string {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var out []string
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "bookstore_consumer_dead_letters{") {
				out = append(out, line)
			}
		}
		return out
	}
}

func TestDeadLetterGaugeShowsTheDepthOfEachQueuesDLQ(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.deadLetter(t, "m1", "m2")
	conn := broker.NewConn(r.url, "gauge-test")
	t.Cleanup(func() { _ = conn.Close() })
	// "missing" has no DLQ: the broker answers 404 and closes the probe's channel, which
	// must cost that queue its value and no other queue its own.
	scrape := gaugeLines(t, conn, "missing", work)

	want := `bookstore_consumer_dead_letters{queue="work"} 2`
	if got := scrape(); len(got) != 1 || got[0] != want {
		t.Fatalf("gauge lines = %q, want only %q", got, want)
	}
	if _, err := deadletter.Replay(context.Background(), r.channel(t), work); err != nil {
		t.Fatal(err)
	}
	want = `bookstore_consumer_dead_letters{queue="work"} 0`
	if got := scrape(); len(got) != 1 || got[0] != want {
		t.Fatalf("after the replay: gauge lines = %q, want only %q", got, want)
	}
}

// With the broker unreachable the gauge shows nothing, rather than a zero that reads as
// "nothing is dead-lettered", and the scrape is not held up past the probe's timeout.
func TestDeadLetterGaugeShowsNoValueWhenTheBrokerIsUnreachable(t *testing.T) {
	t.Parallel()
	conn := broker.NewConn("amqp://guest:guest@"+testenv.FreeAddr(t)+"/", "gauge-test")
	scrape := gaugeLines(t, conn, work)
	start := time.Now()
	if got := scrape(); len(got) != 0 {
		t.Errorf("gauge lines with the broker down = %q, want none", got)
	}
	if took := time.Since(start); took > consumer.DeadLetterProbeTimeout+time.Second {
		t.Errorf("scrape took %v with the broker down, want at most the probe timeout %v", took, consumer.DeadLetterProbeTimeout)
	}
}
