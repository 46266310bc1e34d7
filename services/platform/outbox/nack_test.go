package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// queueFull puts an operator's policy on queue in the vhost at amqpURL that makes the
// broker nack every publish to it (max-length 0, overflow reject-publish), waits until the
// queue applies it, and returns the function that removes it again.
func queueFull(t *testing.T, amqpURL, queue string) (remove func()) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	vhost := url.PathEscape(strings.TrimPrefix(u.Path, "/"))
	m := broker.Management{URL: testenv.ManagementURL()}
	ctx := context.Background()
	policy := "/api/policies/" + vhost + "/queue-full"
	body := `{"pattern":"^` + queue + `$","apply-to":"queues","priority":100,"definition":{"max-length":0,"overflow":"reject-publish"}}`
	if err := m.Do(ctx, http.MethodPut, policy, body, nil); err != nil {
		t.Fatal(err)
	}
	applied := func(want string) func() bool {
		return func() bool {
			var q struct {
				Policy string `json:"policy"`
			}
			err := m.Do(ctx, http.MethodGet, "/api/queues/"+vhost+"/"+url.PathEscape(queue), "", &q)
			return err == nil && q.Policy == want
		}
	}
	testenv.Eventually(t, 30*time.Second, "the queue-full policy applied to "+queue, applied("queue-full"))
	return func() {
		t.Helper()
		if err := m.Do(ctx, http.MethodDelete, policy, "", nil); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the queue-full policy removed from "+queue, applied(""))
	}
}

// An operator caps a queue at length 0 with overflow reject-publish: the broker nacks
// every event bound to it. A nack is the broker's refusal (a queue's overflow, an
// internal error, a quorum queue's leader moving), never a fault of the event: the relay
// tries the rows cycle after cycle, each after the rows' own short backoff, without
// spending an attempt or parking one as dead, says it is not ready while the nacks last,
// and publishes every row once the cap is gone.
func TestANackedPublishSpendsNoAttempt(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	const rows = 5
	writeEvents(t, pool, testenv.ExampleType, "nacked", rows, 1)
	removePolicy := queueFull(t, amqpURL, testenv.ExampleQueue)
	// A quorum queue's reject-publish is soft: the queue takes what comes while it is
	// within its limit and turns publishers away once it is over. One message puts it
	// over a limit of 0.
	sut.PublishPoison(t, amqpURL, broker.Message{RoutingKey: testenv.ExampleType,
		Publishing: amqp.Publishing{MessageId: "over-the-limit", Body: []byte("{}")}})

	ctx := context.Background()
	conn := broker.NewConn(amqpURL, "relay")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel,
		outbox.Config{ID: "relay", MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond, OutageMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const cycles = 6 // three times the attempts a row has
	for cycle := 1; cycle <= cycles; cycle++ {
		testenv.Eventually(t, 10*time.Second, "the nacked rows' backoff over", func() bool {
			return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending' AND available_at > now()") == 0
		})
		pending := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending'")
		n, err := relay.RunOnce(ctx)
		if n != pending {
			t.Errorf("cycle %d claimed %d of %d pending rows: a nacked row must be free to try again after its backoff", cycle, n, pending)
		}
		if !broker.Unavailable(err) || !errors.Is(err, broker.ErrNacked) {
			t.Errorf("cycle %d: RunOnce = %v, want the nack reported as the broker unavailable", cycle, err)
		}
		if err := relay.Ready(ctx); !errors.Is(err, broker.ErrNacked) {
			t.Errorf("cycle %d: Ready = %v while the broker nacks, want the nack", cycle, err)
		}
	}
	if spent := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE attempts > 0 OR state <> 'pending'"); spent > 0 {
		t.Fatalf("after %d cycles of nacks %d of %d rows spent attempts, %d parked dead, %d published",
			cycles, spent, rows, testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'dead'"),
			testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'"))
	}

	removePolicy()
	testenv.Eventually(t, 30*time.Second, "every row published once the cap is gone", func() bool {
		_, _ = relay.RunOnce(ctx)
		return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published' AND attempts = 0") == rows
	})
	// The relay never ran (it holds no lock), so Ready has that to say; the nack is over.
	if err := relay.Ready(ctx); errors.Is(err, broker.ErrNacked) {
		t.Errorf("Ready = %v after every row was published", err)
	}
	if d := testenv.QueueDepth(t, amqpURL, testenv.ExampleQueue); d != rows+1 {
		t.Errorf("queue holds %d messages, want the %d events and the one that filled it", d, rows)
	}
}
