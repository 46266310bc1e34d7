package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// BenchmarkRelayAgainstBarePublish measures, in one run on the same broker, how fast the
// relay drains committed outbox rows and how fast a bare loop publishes the same number
// of messages with confirms (pipelined in windows of the relay's batch size, no
// database). relay/bare is the price of the outbox's guarantees: claim, mark, lease.
func BenchmarkRelayAgainstBarePublish(b *testing.B) {
	pool, amqpURL, tel := setup(b)
	const events, batch = 2000, 256
	ctx := context.Background()

	conn := broker.NewConn(amqpURL, "bench")
	defer conn.Close()
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, sut.Topology, 10*time.Second), tel, outbox.Config{ID: "bench", BatchSize: batch})
	if err != nil {
		b.Fatal(err)
	}
	ch := sut.Channel(b, amqpURL)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"specversion":"1.0","id":"00000000-0000-7000-8000-000000000000","data":{"n":1}}`)

	var relayTime, bareTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		writeEvents(b, pool, testenv.ExampleType, "bench-"+string(rune('a'+i%26))+time.Now().Format("150405.000000"), events, 1)
		purge(b, ch)
		b.StartTimer()

		start := time.Now()
		for drained := 0; drained < events; {
			n, err := relay.RunOnce(ctx)
			if err != nil {
				b.Fatal(err)
			}
			drained += n
		}
		relayTime += time.Since(start)

		start = time.Now()
		for sent := 0; sent < events; sent += batch {
			confirms := make([]*amqp.DeferredConfirmation, 0, batch)
			for j := 0; j < batch && sent+j < events; j++ {
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, sut.Topology.Exchange, testenv.ExampleType, true, false,
					amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: event.ContentType, Body: body})
				if err != nil {
					b.Fatal(err)
				}
				confirms = append(confirms, dc)
			}
			for _, dc := range confirms {
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					b.Fatalf("confirm: %v %v", ok, err)
				}
			}
		}
		bareTime += time.Since(start)
	}
	b.StopTimer()
	relayRate := float64(events*b.N) / relayTime.Seconds()
	bareRate := float64(events*b.N) / bareTime.Seconds()
	b.ReportMetric(relayRate, "relay-events/s")
	b.ReportMetric(bareRate, "bare-events/s")
	b.ReportMetric(relayRate/bareRate, "relay/bare")
	purge(b, ch)
}

func purge(b testing.TB, ch *amqp.Channel) {
	if _, err := ch.QueuePurge(testenv.ExampleQueue, false); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelayQueueCheck measures, in one run, what the topology check costs the relay
// (an event published once per queue bound to its type, under that queue's copy key,
// `mandatory`; each queue bound to its copy key once per channel):
// the same rows drained by a relay that checks and by one that trusts `mandatory` alone,
// in batches of one (an idle system: one event a wake-up) and of 256 (a backlog).
// checked/unchecked is the share of the unchecked rate the check leaves.
func BenchmarkRelayQueueCheck(b *testing.B) {
	for _, batch := range []int{1, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			pool, amqpURL, tel := setup(b)
			ch := sut.Channel(b, amqpURL)
			events := 200 * min(batch, 10)
			relays := map[bool]*outbox.Relay{}
			for _, checked := range []bool{true, false} {
				conn := broker.NewConn(amqpURL, "bench")
				b.Cleanup(func() { _ = conn.Close() })
				topology := sut.Topology
				if !checked {
					topology = topology.Subset() // told of no queue, the publisher checks none
				}
				pub := broker.NewPublisher(conn, topology, 10*time.Second)
				relay, err := outbox.NewRelay(pool, pub, tel, outbox.Config{ID: fmt.Sprint("bench-", checked), BatchSize: batch})
				if err != nil {
					b.Fatal(err)
				}
				relays[checked] = relay
			}
			took := map[bool]time.Duration{}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Alternate which goes first: the first to drain after the rows are
				// written pays for what Postgres does on a first read.
				for _, checked := range []bool{i%2 == 0, i%2 != 0} {
					b.StopTimer()
					writeEvents(b, pool, testenv.ExampleType, fmt.Sprintf("check-%v-%d-%s", checked, i, time.Now().Format("150405.000000")), events, 1)
					purge(b, ch)
					b.StartTimer()
					start := time.Now()
					for drained := 0; drained < events; {
						n, err := relays[checked].RunOnce(context.Background())
						if err != nil {
							b.Fatal(err)
						}
						drained += n
					}
					took[checked] += time.Since(start)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(events*b.N)/took[true].Seconds(), "checked-events/s")
			b.ReportMetric(float64(events*b.N)/took[false].Seconds(), "unchecked-events/s")
			b.ReportMetric(took[false].Seconds()/took[true].Seconds(), "checked/unchecked")
			purge(b, ch)
		})
	}
}
