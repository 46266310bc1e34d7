package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// refusedType is bound to a queue of its own, refusingQueue, beside the example system's.
const refusedType, refusingQueue = "example.refused.v1", "example.refusing"

var withRefusingQueue = broker.Topology{
	Exchange:           testenv.ExampleTopology.Exchange,
	DeadLetterExchange: testenv.ExampleTopology.DeadLetterExchange,
	Queues: []broker.Queue{
		{Name: testenv.ExampleQueue, Bindings: []string{testenv.ExampleType}},
		{Name: refusingQueue, Bindings: []string{refusedType}},
	},
}

// One queue refuses every event for good (an operator's max-length 0 with overflow
// reject-publish), and the one row bound to it is the oldest pending, so every batch
// claims it. Its refusal is that queue's, not the relay's: 2,000 events bound to a
// healthy queue drain at no less than 80% of the rate they drain at without it, measured
// in the same test by the same relay, the refused row set aside and put back claimable
// between rounds. The refused row spends no attempt.
func TestOneRefusedRowDoesNotSlowTheOthers(t *testing.T) {
	pool, amqpURL, tel := setup(t)
	refusing := testenv.System{Topology: withRefusingQueue}
	refusing.Channel(t, amqpURL)
	queueFull(t, amqpURL, refusingQueue)
	// A quorum queue's reject-publish is soft: one message puts it over a limit of 0.
	refusing.PublishPoison(t, amqpURL, broker.Message{RoutingKey: refusedType,
		Publishing: amqp.Publishing{MessageId: "over-the-limit", Body: []byte("{}")}})

	conn := broker.NewConn(amqpURL, "relay")
	t.Cleanup(func() { conn.Close() })
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, withRefusingQueue, 10*time.Second), tel,
		outbox.Config{ID: "relay"}) // the default backoffs: the old relay waited up to 10 s between batches
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, relay)
	const events, rounds = 2000, 3
	published := 0
	drain := func(prefix string) time.Duration {
		t.Helper()
		writeEvents(t, pool, testenv.ExampleType, prefix, events, 1) // one commit: the relay sees them all at once
		start := time.Now()
		published += events
		testenv.Eventually(t, 2*time.Minute, "the events of "+prefix+" published", func() bool {
			return testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'published'") == published
		})
		return time.Since(start)
	}
	// Rounds alternate, and the median of each kind is compared, so that a moment of load
	// from the machine's other work does not decide the ratio.
	var alone, beside []time.Duration
	ctx := context.Background()
	for round := range rounds {
		if round > 0 { // set aside, where no relay claims it
			_, _ = pool.Exec(ctx, "UPDATE outbox SET state = 'dead' WHERE event_type = $1", refusedType)
		}
		alone = append(alone, drain(fmt.Sprintf("alone-%d", round)))
		if round == 0 {
			writeEvents(t, pool, refusedType, "refused", 1, 1)
			testenv.Eventually(t, 30*time.Second, "the relay has met the refusal", func() bool {
				return errors.Is(relay.Ready(ctx), broker.ErrNacked)
			})
		} else { // back, and claimable at once
			_, _ = pool.Exec(ctx, "UPDATE outbox SET state = 'pending', available_at = now() WHERE event_type = $1", refusedType)
		}
		beside = append(beside, drain(fmt.Sprintf("beside-%d", round)))
	}
	slices.Sort(alone)
	slices.Sort(beside)
	ratio := alone[rounds/2].Seconds() / beside[rounds/2].Seconds()
	t.Logf("2,000 events alone in %v, beside a refused row in %v (medians of %d): rate ratio %.2f", alone[rounds/2].Round(time.Millisecond), beside[rounds/2].Round(time.Millisecond), rounds, ratio)
	if ratio < 0.8 {
		t.Errorf("beside one refused row the others drained at %.2f of their rate alone (%v against %v), want at least 0.80",
			ratio, beside, alone)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending' AND attempts = 0 AND event_type = $1", refusedType); n != 1 {
		t.Errorf("the refused row is not pending with no attempt spent")
	}
	if err := relay.Ready(context.Background()); !errors.Is(err, broker.ErrNacked) {
		t.Errorf("Ready = %v while a queue refuses, want the nack", err)
	}
}
