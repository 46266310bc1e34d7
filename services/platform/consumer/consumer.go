// Package consumer runs a service's queue: it decodes each delivery, hands it to the
// service's handler and acknowledges only after the handler's transaction committed.
//
// It closes three failures. Acking before the work is done loses the message when the
// process dies mid-way; here the ack comes last, so a crash means a redelivery (which the
// inbox turns into a no-op). Acking a message whose handler failed hides the failure
// (eShopOnContainers did); here a failure is requeued after a backoff, bounded by the
// queue's delivery limit. And a message that can never succeed must not circle forever:
// it is rejected without requeue, lands in the queue's DLQ at once, and is counted.
package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Outcome is what a handler did with a message it accepted.
type Outcome int

const (
	// Processed: the work was done and committed.
	Processed Outcome = iota + 1
	// Duplicate: the message had been processed before; nothing was done. A success.
	Duplicate
)

// Handler does the work of one event. An error wrapping *event.PoisonError dead-letters
// the message; any other error requeues it after a backoff.
type Handler func(ctx context.Context, env event.Envelope) (Outcome, error)

// Config tunes a Consumer.
type Config struct {
	Name        string   // the consumer's name: inbox key and metric label, e.g. "inventory"
	Queue       string   // the queue to consume
	Types       []string // the event types the handler knows; any other type is poison
	Prefetch    int      // unacked deliveries the broker may push (default 2×Concurrency)
	Concurrency int      // handlers running at once (default 4)
	RetryBase   time.Duration
	RetryMax    time.Duration
}

// Consumer consumes one queue until its context ends.
type Consumer struct {
	conn    *broker.Conn
	cfg     Config
	handle  Handler
	log     *slog.Logger
	tracer  trace.Tracer
	m       metrics
	attrSet metric.MeasurementOption
}

// New returns a consumer of cfg.Queue.
func New(conn *broker.Conn, tel *telemetry.Telemetry, cfg Config, handle Handler) (*Consumer, error) {
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 4)
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 2*cfg.Concurrency)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 100*time.Millisecond)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 10*time.Second)
	m, err := newMetrics(tel.Meter("consumer"))
	if err != nil {
		return nil, err
	}
	return &Consumer{
		conn:    conn,
		cfg:     cfg,
		handle:  handle,
		log:     tel.Logger.With("component", "consumer", "consumer", cfg.Name, "queue", cfg.Queue),
		tracer:  tel.Tracer("consumer"),
		m:       m,
		attrSet: metric.WithAttributes(attribute.String("consumer", cfg.Name)),
	}, nil
}

// Run consumes until ctx ends, reconnecting after the broker or the connection goes away.
// On return every delivery it started has been acked, rejected or requeued.
func (c *Consumer) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		err := c.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		failures++
		c.log.WarnContext(ctx, "consumer lost its channel, reconnecting", "err", err, "attempt", failures)
		if !backoff.Sleep(ctx, backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, failures)) {
			return nil
		}
		if err == nil {
			failures = 0
		}
	}
	return nil
}

func (c *Consumer) consume(ctx context.Context) error {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := broker.DeclareTopology(ch); err != nil {
		return err
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	tag := c.cfg.Name + "-" + randomTag()
	deliveries, err := ch.ConsumeWithContext(ctx, c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	c.log.InfoContext(ctx, "consuming", "prefetch", c.cfg.Prefetch, "concurrency", c.cfg.Concurrency)
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range deliveries {
				c.deliver(ctx, d)
			}
		}()
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	select {
	case <-ctx.Done():
		// Stop new deliveries, let the workers finish the ones they hold, then close.
		_ = ch.Cancel(tag, false)
		wg.Wait()
		return nil
	case err := <-closed:
		wg.Wait()
		if err == nil {
			return errors.New("channel closed")
		}
		return err
	}
}

// deliver handles one delivery to its end: ack, reject or requeue. The handler runs on a
// context that survives shutdown for a bounded time, so a SIGTERM lets the transaction in
// progress commit and be acked instead of being cut in half.
func (c *Consumer) deliver(ctx context.Context, d amqp.Delivery) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	hctx = telemetry.Propagator.Extract(hctx, headerCarrier(d.Headers))
	hctx, span := c.tracer.Start(hctx, c.cfg.Queue+" process",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitmq,
			semconv.MessagingDestinationName(c.cfg.Queue),
			semconv.MessagingMessageID(d.MessageId),
			semconv.MessagingRabbitmqDestinationRoutingKey(d.RoutingKey),
			attribute.Int64("messaging.rabbitmq.delivery_count", deliveryCount(d)),
		))
	defer span.End()
	start := time.Now()
	if d.Redelivered || deliveryCount(d) > 0 {
		c.m.redeliveries.Add(hctx, 1, c.attrSet)
	}

	outcome, err := c.process(hctx, d)
	c.m.duration.Record(hctx, time.Since(start).Seconds(), c.attrSet)
	log := c.log.With("message_id", d.MessageId, "type", d.Type)

	if reason, ok := event.IsPoison(err); ok {
		span.SetStatus(codes.Error, "poison")
		span.RecordError(err)
		c.m.poison.Add(hctx, 1, metric.WithAttributes(attribute.String("consumer", c.cfg.Name), attribute.String("reason", reason)))
		log.ErrorContext(hctx, "poison message dead-lettered", "reason", reason, "err", err)
		if err := d.Reject(false); err != nil {
			log.WarnContext(hctx, "reject failed; the broker will redeliver", "err", err)
		}
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, "transient failure")
		span.RecordError(err)
		c.m.failures.Add(hctx, 1, c.attrSet)
		// Hold the message for a backoff before requeueing: an outage of the database
		// should not burn through the queue's delivery limit in a hot loop.
		delay := backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, int(deliveryCount(d))+1)
		log.WarnContext(hctx, "handler failed, requeueing", "err", err, "delay", delay, "delivery_count", deliveryCount(d))
		backoff.Sleep(ctx, delay)
		if err := d.Nack(false, true); err != nil {
			log.WarnContext(hctx, "nack failed; the broker will redeliver", "err", err)
		}
		return
	}
	switch outcome {
	case Duplicate:
		c.m.duplicates.Add(hctx, 1, c.attrSet)
		span.SetAttributes(attribute.Bool("bookstore.duplicate", true))
		log.InfoContext(hctx, "duplicate skipped")
	default:
		c.m.processed.Add(hctx, 1, c.attrSet)
	}
	if err := d.Ack(false); err != nil {
		// The work is committed; the redelivery this causes will be a duplicate.
		log.WarnContext(hctx, "ack failed; the broker will redeliver", "err", err)
	}
}

func (c *Consumer) process(ctx context.Context, d amqp.Delivery) (Outcome, error) {
	env, err := event.Decode(d.Body, c.cfg.Types...)
	if err != nil {
		return 0, err
	}
	if d.MessageId != "" && d.MessageId != env.ID {
		return 0, event.Poison(event.ReasonInvalidEnvelope, fmt.Errorf("message_id %q differs from event id %q", d.MessageId, env.ID))
	}
	return c.handle(ctx, env)
}

func deliveryCount(d amqp.Delivery) int64 {
	switch v := d.Headers["x-delivery-count"].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int:
		return int64(v)
	}
	return 0
}

// headerCarrier reads W3C trace context from AMQP headers.
type headerCarrier amqp.Table

func (h headerCarrier) Get(key string) string {
	if s, ok := h[key].(string); ok {
		return s
	}
	return ""
}
func (h headerCarrier) Set(key, value string) { h[key] = value }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

func randomTag() string { return fmt.Sprintf("%08x", rand.Uint32()) }

type metrics struct {
	processed, duplicates, poison, redeliveries, failures metric.Int64Counter
	duration                                              metric.Float64Histogram
}

func newMetrics(m metric.Meter) (metrics, error) {
	var out metrics
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	out.processed = counter("bookstore.consumer.processed", "Messages processed and committed.")
	out.duplicates = counter("bookstore.consumer.duplicates", "Messages acked as duplicates of one already processed.")
	out.poison = counter("bookstore.consumer.poison", "Messages dead-lettered as poison, by reason.")
	out.redeliveries = counter("bookstore.consumer.redeliveries", "Deliveries the broker marked as redelivered.")
	out.failures = counter("bookstore.consumer.transient_failures", "Handler failures requeued for another try.")
	var err error
	out.duration, err = m.Float64Histogram("bookstore.consumer.handler_duration", metric.WithUnit("s"),
		metric.WithDescription("Time from delivery to ack, reject or requeue."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("consumer metrics: %w", err)
	}
	return out, nil
}
