package consumer

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// DeadLetterProbeTimeout bounds how long a /metrics scrape waits for the broker to report
// the depth of the dead-letter queues. A scrape that waits longer shows no value for them.
const DeadLetterProbeTimeout = 2 * time.Second

// ObserveDeadLetters exports the gauge bookstore.consumer.dead_letters{queue}: how many
// messages wait in each queue's dead-letter queue for an operator (`dlq list QUEUE`,
// `dlq replay QUEUE`). Nothing else brings them back, so above zero is an alert.
//
// Each scrape asks the broker with a passive queue declaration on the gauge's own channel
// from conn, bounded by DeadLetterProbeTimeout. While the broker is unreachable or a probe
// still waits, the gauge shows no value rather than a stale or a false zero.
func ObserveDeadLetters(tel *telemetry.Telemetry, conn *broker.Conn, queues ...string) error {
	m := tel.Meter("deadletter")
	gauge, err := m.Int64ObservableGauge("bookstore.consumer.dead_letters",
		metric.WithDescription("Messages waiting in the queue's dead-letter queue (<queue>.dlq) until an operator replays them."))
	if err != nil {
		return fmt.Errorf("dead-letter gauge: %w", err)
	}
	p := &probe{conn: conn, queues: queues}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for queue, n := range p.depths(ctx) {
			o.ObserveInt64(gauge, int64(n), metric.WithAttributes(attribute.String("queue", queue)))
		}
		return nil // a failed probe shows no value rather than failing the scrape
	}, gauge)
	if err != nil {
		return fmt.Errorf("dead-letter gauge: %w", err)
	}
	return nil
}

// probe asks the broker for the depth of the queues' DLQs, one scrape at a time.
type probe struct {
	conn   *broker.Conn
	queues []string

	busy sync.Mutex    // held by the probe in flight
	ch   *amqp.Channel // guarded by busy; reopened when the broker closed it
}

// depths returns the depth of each queue's DLQ that the broker reported within
// DeadLetterProbeTimeout; a queue it could not ask about is missing.
func (p *probe) depths(ctx context.Context) map[string]int {
	if !p.busy.TryLock() {
		return nil // the last probe is still waiting for the broker
	}
	ctx, cancel := context.WithTimeout(ctx, DeadLetterProbeTimeout)
	defer cancel()
	done := make(chan map[string]int, 1)
	go func() {
		defer p.busy.Unlock()
		done <- p.ask(ctx)
	}()
	select {
	case out := <-done:
		return out
	case <-ctx.Done():
		return nil
	}
}

// ask declares each DLQ passively. A missing queue is a channel error that closes the
// channel, so the next queue gets a new one.
func (p *probe) ask(ctx context.Context) map[string]int {
	out := map[string]int{}
	for _, queue := range p.queues {
		if p.ch == nil || p.ch.IsClosed() {
			ch, err := p.conn.Channel(ctx)
			if err != nil {
				return out
			}
			p.ch = ch
		}
		q, err := p.ch.QueueDeclarePassive(broker.Queue{Name: queue}.DLQ(), true, false, false, false, nil)
		if err != nil {
			continue
		}
		out[queue] = q.Messages
	}
	return out
}
