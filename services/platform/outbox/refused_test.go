package outbox_test

import (
	"context"
	"errors"
	"fmt"
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
// healthy queue drain at no less than half the rate they drain at without it, measured
// in the same test by the same relay, the refused row set aside between rounds and put
// back on its own retry schedule. (Measured here: 0.89 to 1.10; a relay that backs off
// as a whole for the refusal, 0.08. A round lasts a third of a second, so the bound
// leaves room for a busy machine's hiccups.) The refused row spends no attempt.
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
	const events, rounds = 2000, 4
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
	// Rounds alternate (alone first, then beside first, ...) and the rates are compared
	// over all of them, so that neither a moment of load from the machine's other work nor
	// the table's growth from round to round decides the ratio.
	ctx := context.Background()
	var alone, beside []time.Duration
	refusedWritten := false
	for round := range rounds {
		for _, besideFirst := range []bool{round%2 == 1, round%2 == 0} {
			if !besideFirst {
				// Set aside, where no relay claims it.
				_, _ = pool.Exec(ctx, "UPDATE outbox SET state = 'dead' WHERE event_type = $1", refusedType)
				alone = append(alone, drain(fmt.Sprintf("alone-%d", round)))
				continue
			}
			if !refusedWritten {
				writeEvents(t, pool, refusedType, "refused", 1, 1)
				testenv.Eventually(t, 30*time.Second, "the relay has met the refusal", func() bool {
					return errors.Is(relay.Ready(ctx), broker.ErrNacked)
				})
				refusedWritten = true
			} else { // back, on its own retry schedule
				_, _ = pool.Exec(ctx, "UPDATE outbox SET state = 'pending' WHERE event_type = $1", refusedType)
			}
			beside = append(beside, drain(fmt.Sprintf("beside-%d", round)))
		}
	}
	var aloneTotal, besideTotal time.Duration
	for i := range rounds {
		aloneTotal += alone[i]
		besideTotal += beside[i]
	}
	ratio := aloneTotal.Seconds() / besideTotal.Seconds()
	t.Logf("%d rounds of 2,000 events: alone %v, beside a refused row %v; rate ratio %.2f", rounds, alone, beside, ratio)
	if ratio < 0.5 {
		t.Errorf("beside one refused row the others drained at %.2f of their rate alone (%v against %v), want at least 0.5",
			ratio, besideTotal.Round(time.Millisecond), aloneTotal.Round(time.Millisecond))
	}
	_, _ = pool.Exec(ctx, "UPDATE outbox SET state = 'pending' WHERE event_type = $1", refusedType)
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE state = 'pending' AND attempts = 0 AND event_type = $1", refusedType); n != 1 {
		t.Errorf("the refused row is not pending with no attempt spent")
	}
	if err := relay.Ready(context.Background()); !errors.Is(err, broker.ErrNacked) {
		t.Errorf("Ready = %v while a queue refuses, want the nack", err)
	}
}
