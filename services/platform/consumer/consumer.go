// Package consumer runs a service's queue: it decodes each delivery, hands it to the
// service's handler and acknowledges only after the handler's transaction committed.
//
// It closes four failures: a crash mid-way means a redelivery, which the inbox makes a
// no-op (the ack comes last); a failed handler's message is requeued after a backoff,
// bounded by the queue's delivery limit; a message that can never succeed goes to the
// DLQ at once; and an outage is not the message's fault: the consumer closes its channel,
// waits until the dependency answers and consumes again, so x-delivery-limit counts only
// failures on healthy dependencies.
package consumer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Handler does the work of one event. An error wrapping *event.PoisonError dead-letters
// the message; any other error is retried: in place when it is transient, after a pause
// of the whole consumer when a dependency is down, and otherwise by requeueing the
// message after a backoff.
type Handler func(ctx context.Context, env event.Envelope) (inbox.Outcome, error)

// BatchHandler does the work of several events at once, typically in one transaction,
// and returns one outcome per message. It is an optimisation of the common case only:
// when it returns an error, the consumer hands each message of the batch to the Handler
// alone, where every rule above applies (a poison message rejected, a failure retried,
// an outage waited out), so one bad message cannot fail its neighbours. Behind an inbox
// that is safe whatever the batch had committed: a message done already is a duplicate.
type BatchHandler func(ctx context.Context, msgs []inbox.Message) ([]inbox.Outcome, error)

// Config tunes a Consumer.
type Config struct {
	Name     string          // the consumer's name: inbox key and metric label, e.g. "inventory"
	Queue    string          // the queue to consume, one of Topology's
	Topology broker.Topology // what the consumer declares on every channel it opens: its own part of the system (broker.Topology.Subset), at least Queue
	Types    []string        // the event types the handler knows; any other type is poison
	// Producer is the broker user whose events the queue takes: the AMQP user-id its
	// publisher sets (broker.Publisher sets its login, and RabbitMQ refuses a user-id
	// other than the publishing connection's login). A delivery through the exchange with
	// another user-id, or none, is poison ReasonProducer before a byte of it is read, and
	// one routed under a key other than its envelope's type, or the type's copy to this
	// queue (broker.QueueKey), is poison ReasonRoutingKey. A
	// delivery through the default exchange, straight into the queue, is an operator's
	// replay of a dead letter (dlq replay): only an administrator may publish there, and
	// it is taken whatever its user-id. Required.
	Producer    string
	Prefetch    int // unacked deliveries the broker may push (default 2×Concurrency×BatchSize)
	Concurrency int // handlers running at once (default 4)
	// Batch, if set, takes the deliveries that have arrived together, up to BatchSize
	// (default 16), in one call. Under light load each message still goes alone and at
	// once: a batch is only what was already waiting.
	Batch     BatchHandler
	BatchSize int
	RetryBase time.Duration
	RetryMax  time.Duration // of a message's requeue backoff, and of the wait for a dependency
	// Healthy is asked after a handler fails: an error means the failure was the
	// dependency's (its database is unreachable, its pool exhausted), not the message's.
	// Typically the pool's Ping. Nil: every failure is the message's.
	Healthy func(context.Context) error
	// InPlaceRetries is how often a transient failure (pgdb.Transient: a deadlock, a
	// serialization failure, a dropped connection) is retried before the message is
	// requeued (default 3).
	InPlaceRetries int
	// MaxFailures is how often one message may fail here before the consumer dead-letters
	// it itself (default broker.DeliveryLimit+1, one failure per delivery the queue's
	// limit allows): a second guard behind the broker's count, which acts first wherever
	// it counts. The count lives in this process only, so with several consumers of a
	// queue, or after a restart, the broker's limit is the one that holds.
	MaxFailures    int
	HandlerTimeout time.Duration // the most one delivery may take, even during shutdown (default 30s)
	// MaxMessageSize is the largest body the consumer reads, in bytes (default
	// DefaultMaxMessageSize); a larger message is poison before it is decoded.
	MaxMessageSize int
}

// DefaultMaxMessageSize is the largest message body a consumer reads unless told
// otherwise: 64 KiB, about fourteen times Bookstore's largest legitimate event (a
// StockRejected of 50 lines to a 254-character address, with a reason and a full
// tracestate: 4,611 bytes, TestTheLargestEventIsFarBelowTheConsumersLimit).
const DefaultMaxMessageSize = 64 << 10

// Consumer consumes one queue until its context ends.
type Consumer struct {
	conn    *broker.Conn
	cfg     Config
	handle  Handler
	log     *slog.Logger
	tracer  trace.Tracer
	m       metrics
	attrSet metric.MeasurementOption

	state   atomic.Pointer[string] // why it is not consuming; nil while it is
	holding atomic.Int32           // deliveries held while the database refuses their work
	refusal atomic.Pointer[string] // the database's last refusal
	failedM sync.Mutex
	failed  map[string]int // failures per message id: the requeue backoff's own counter
}

// New returns a consumer of cfg.Queue. Give it a broker.Conn that does not publish: see
// broker.Conn.
func New(conn *broker.Conn, tel *telemetry.Telemetry, cfg Config, handle Handler) (*Consumer, error) {
	if cfg.Producer == "" {
		return nil, fmt.Errorf("consumer %s: no Producer: the broker user whose events %s takes", cfg.Name, cfg.Queue)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 4)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 16)
	if cfg.Batch == nil {
		cfg.BatchSize = 1
	}
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 2*cfg.Concurrency*cfg.BatchSize)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 100*time.Millisecond)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 10*time.Second)
	cfg.InPlaceRetries = cmp.Or(cfg.InPlaceRetries, 3)
	cfg.MaxFailures = cmp.Or(cfg.MaxFailures, broker.DeliveryLimit+1)
	cfg.HandlerTimeout = cmp.Or(cfg.HandlerTimeout, 30*time.Second)
	cfg.MaxMessageSize = cmp.Or(cfg.MaxMessageSize, DefaultMaxMessageSize)
	c := &Consumer{
		conn:    conn,
		cfg:     cfg,
		handle:  handle,
		log:     tel.Logger.With("component", "consumer", "consumer", cfg.Name, "queue", cfg.Queue),
		tracer:  tel.Tracer("consumer"),
		attrSet: metric.WithAttributes(attribute.String("consumer", cfg.Name)),
		failed:  map[string]int{},
	}
	c.setState("not started")
	m, err := newMetrics(tel.Meter("consumer"), c)
	if err != nil {
		return nil, err
	}
	c.m = m
	return c, nil
}

// Ready reports whether the consumer is consuming its queue now, for /readyz: a consumer
// that lost its channel, was cancelled by the server, waits out an outage or holds
// deliveries the database refuses says why.
func (c *Consumer) Ready(context.Context) error {
	if why := c.state.Load(); why != nil {
		return fmt.Errorf("%s is not consuming %s: %s", c.cfg.Name, c.cfg.Queue, *why)
	}
	if n := c.holding.Load(); n > 0 {
		return fmt.Errorf("%s holds %d deliveries of %s: the database refuses their work: %s", c.cfg.Name, n, c.cfg.Queue, *c.refusal.Load())
	}
	return nil
}

func (c *Consumer) setState(why string) {
	if why == "" {
		c.state.Store(nil)
		return
	}
	c.state.Store(&why)
}
