package outbox_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/testenv"
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
	relay, err := outbox.NewRelay(pool, broker.NewPublisher(conn, testenv.Topology, 10*time.Second), tel, outbox.Config{ID: "bench", BatchSize: batch})
	if err != nil {
		b.Fatal(err)
	}
	ch := testenv.Channel(b, amqpURL)
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
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, testenv.Topology.Exchange, testenv.ExampleType, true, false,
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

func purge(b *testing.B, ch *amqp.Channel) {
	if _, err := ch.QueuePurge(testenv.ExampleQueue, false); err != nil {
		b.Fatal(err)
	}
}
