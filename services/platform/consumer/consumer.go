// Package consumer runs a service's queue: it decodes each delivery, hands it to the
// service's handler and acknowledges only after the handler's transaction committed.
//
// It closes four failures. Acking before the work is done loses the message when the
// process dies mid-way; here the ack comes last, so a crash means a redelivery (which the
// inbox turns into a no-op). Acking a message whose handler failed hides the failure
// (eShopOnContainers did); here a failure is requeued after a backoff, bounded by the
// queue's delivery limit. A message that can never succeed must not circle forever: it
// is rejected without requeue, lands in the queue's DLQ at once, and is counted. And an
// outage is not the message's fault: when the handler fails because its database is
// down, requeueing would spend the message's deliveries until RabbitMQ dead-letters a
// perfectly good message. Here the consumer stops instead: it closes its channel, which
// returns what it held to the queue, waits until the dependency answers, and consumes
// again. x-delivery-limit then means what it says: a message that keeps failing while
// everything it needs is healthy.
package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
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
// the message; any other error is retried: in place when it is transient, after a pause
// of the whole consumer when a dependency is down, and otherwise by requeueing the
// message after a backoff.
type Handler func(ctx context.Context, env event.Envelope) (Outcome, error)

// BatchHandler does the work of several events at once, typically in one transaction,
// and returns one outcome per message. It is an optimisation of the common case only:
// when it returns an error, the consumer hands each message of the batch to the Handler
// alone, where every rule above applies (a poison message rejected, a failure retried,
// an outage waited out), so one bad message cannot fail its neighbours. Behind an inbox
// that is safe whatever the batch had committed: a message done already is a duplicate.
type BatchHandler func(ctx context.Context, msgs []Message) ([]Outcome, error)

// Message is one delivery of a batch: its event, and the span that processes it, which
// the events its work causes continue (outbox.Event.Cause).
type Message struct {
	Envelope event.Envelope
	Span     trace.SpanContext
}

// Config tunes a Consumer.
type Config struct {
	Name        string          // the consumer's name: inbox key and metric label, e.g. "inventory"
	Queue       string          // the queue to consume, one of Topology's
	Topology    broker.Topology // what the consumer declares on every channel it opens: its own part of the system (broker.Topology.Subset), at least Queue
	Types       []string        // the event types the handler knows; any other type is poison
	Prefetch    int             // unacked deliveries the broker may push (default 2×Concurrency×BatchSize)
	Concurrency int             // handlers running at once (default 4)
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
	// RequeueRefused is the wrong design `make chaos-compare` runs
	// (CONSUMER_ON_REFUSAL=requeue): a failure the database gives any message's work
	// (pgdb.Refused) is taken for the message's own and requeued, spending a delivery
	// each time.
	RequeueRefused bool
	// InPlaceRetries is how often a transient failure (pgdb.Transient: a deadlock, a
	// serialization failure, a dropped connection) is retried before the message is
	// requeued (default 3).
	InPlaceRetries int
	HandlerTimeout time.Duration // the most one delivery may take, even during shutdown (default 30s)
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

	state   atomic.Pointer[string] // why it is not consuming; nil while it is
	holding atomic.Int32           // deliveries held while the database refuses their work
	refusal atomic.Pointer[string] // the database's last refusal
	failedM sync.Mutex
	failed  map[string]int // failures per message id: the requeue backoff's own counter
}

// New returns a consumer of cfg.Queue. Give it a broker.Conn that does not publish: see
// broker.Conn.
func New(conn *broker.Conn, tel *telemetry.Telemetry, cfg Config, handle Handler) (*Consumer, error) {
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 4)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 16)
	if cfg.Batch == nil {
		cfg.BatchSize = 1
	}
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 2*cfg.Concurrency*cfg.BatchSize)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 100*time.Millisecond)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 10*time.Second)
	cfg.InPlaceRetries = cmp.Or(cfg.InPlaceRetries, 3)
	cfg.HandlerTimeout = cmp.Or(cfg.HandlerTimeout, 30*time.Second)
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

// errOutage marks a session that ended because a dependency of the handler failed.
var errOutage = errors.New("a dependency of the handler is down")

// healthyPeriod is how long a session must have lasted for its end to start a new count
// of reconnect backoff: a hiccup after an hour of work waits the shortest delay again.
const healthyPeriod = 30 * time.Second

// Run consumes until ctx ends, reconnecting after the broker or the connection goes away
// and pausing while a dependency of the handler is down. On return every delivery it
// started has been acked, rejected or requeued, and every delivery it had not started is
// back in the queue.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.setState("stopped")
	failures := 0
	for ctx.Err() == nil {
		started := time.Now()
		err := c.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > healthyPeriod {
			failures = 0
		}
		c.setState(err.Error())
		c.log.WarnContext(ctx, "consumer stopped consuming; it resumes when the broker and its dependencies answer", "err", err)
		for {
			failures++
			if !backoff.Sleep(ctx, backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, failures)) {
				return nil
			}
			err := c.healthy(ctx)
			if err == nil {
				break
			}
			c.setState(err.Error())
			c.log.DebugContext(ctx, "dependency still down", "err", err)
		}
	}
	return nil
}

func (c *Consumer) healthy(ctx context.Context) error {
	if c.cfg.Healthy == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.cfg.Healthy(ctx); err != nil {
		return fmt.Errorf("%w: %w", errOutage, err)
	}
	return nil
}

// consume runs one session on one channel. It ends when ctx ends, when the channel or
// the server's consumer goes away, or when a handler meets an outage. Closing the channel
// at the end returns every delivery not acked to the queue; RabbitMQ counts that return
// once against the delivery limit, however long the outage lasts.
func (c *Consumer) consume(ctx context.Context) error {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := c.cfg.Topology.Declare(ch); err != nil {
		return err
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	tag := c.cfg.Name + "-" + randomTag()
	deliveries, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	c.setState("")
	c.log.InfoContext(ctx, "consuming", "prefetch", c.cfg.Prefetch, "concurrency", c.cfg.Concurrency)

	stop := make(chan struct{}) // closed: start no further delivery
	outage := make(chan error, c.cfg.Concurrency)
	batches := make(chan []amqp.Delivery)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.gather(deliveries, batches, stop)
	}()
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case ds, ok := <-batches:
					if !ok {
						return
					}
					select {
					case <-stop:
						return // gathered, not started: the channel's close returns them
					default:
					}
					if err := c.deliverAll(ctx, ds); err != nil {
						outage <- err
						return
					}
				}
			}
		}()
	}

	var end error
	select {
	case <-ctx.Done():
	case err := <-outage:
		end = err
	case <-cancelled:
		end = errors.New("the server cancelled the consumer (queue deleted?)")
	case err := <-closed:
		end = cmp.Or[error](err, errors.New("channel closed"))
	}
	c.setState(cmp.Or(errString(end), "shutting down"))
	close(stop)
	wg.Wait() // the handlers at work finish, and ack, before the channel closes
	return end
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// gather hands the deliveries to the workers in batches of what has arrived, at most
// BatchSize: a delivery that finds a worker idle goes at once, alone, and while every
// worker is busy the next batch grows. With no batch handler a batch is one delivery.
func (c *Consumer) gather(deliveries <-chan amqp.Delivery, batches chan<- []amqp.Delivery, stop <-chan struct{}) {
	defer close(batches)
	var batch []amqp.Delivery
	for {
		in, out := deliveries, batches
		if len(batch) == c.cfg.BatchSize {
			in = nil // full: wait for a worker
		}
		if len(batch) == 0 {
			out = nil // empty: wait for a delivery
		}
		select {
		case <-stop:
			return // gathered, not started: the channel's close returns them
		case d, ok := <-in:
			if !ok {
				return
			}
			batch = append(batch, d)
		case out <- batch:
			batch = nil
		}
	}
}

// deliverAll handles a batch: in one call of the batch handler when there is one and it
// succeeds, otherwise one delivery at a time. It returns an outage as deliver does; the
// deliveries not yet handled are left to the channel's close.
func (c *Consumer) deliverAll(ctx context.Context, ds []amqp.Delivery) error {
	for _, d := range ds {
		if d.Redelivered || deliveryCount(d) > 0 {
			c.m.redeliveries.Add(ctx, 1, c.attrSet)
		}
	}
	if len(ds) > 1 && c.deliverBatch(ctx, ds) {
		return nil
	}
	for _, d := range ds {
		if err := c.deliver(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// deliverBatch runs the batch handler over ds and acks them all. It reports false,
// having acked nothing, when any delivery cannot be decoded or the handler failed.
func (c *Consumer) deliverBatch(ctx context.Context, ds []amqp.Delivery) bool {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.HandlerTimeout)
	defer cancel()
	msgs := make([]Message, 0, len(ds))
	spans := make([]trace.Span, 0, len(ds))
	links := make([]trace.Link, 0, len(ds))
	endAll := func(failed error) {
		for _, span := range spans {
			if failed != nil {
				span.SetStatus(codes.Error, "batch failed; handled alone")
				span.RecordError(failed)
			}
			span.End()
		}
	}
	for _, d := range ds {
		env, err := c.decode(d)
		if err != nil {
			endAll(err)
			c.m.batchFallbacks.Add(hctx, 1, c.attrSet)
			return false // poison, for deliver to reject
		}
		_, span := c.startSpan(hctx, d)
		spans = append(spans, span)
		links = append(links, trace.Link{SpanContext: span.SpanContext()})
		msgs = append(msgs, Message{Envelope: env, Span: span.SpanContext()})
	}
	bctx, batchSpan := c.tracer.Start(hctx, c.cfg.Queue+" process batch", trace.WithLinks(links...),
		trace.WithAttributes(attribute.Int("messaging.batch.message_count", len(ds))))
	defer batchSpan.End()

	start := time.Now()
	outcomes, err := c.cfg.Batch(bctx, msgs)
	if err == nil && len(outcomes) != len(ds) {
		err = fmt.Errorf("batch handler returned %d outcomes for %d messages", len(outcomes), len(ds))
	}
	if err != nil {
		batchSpan.RecordError(err)
		endAll(err)
		c.m.batchFallbacks.Add(hctx, 1, c.attrSet)
		c.log.DebugContext(hctx, "batch failed; handling its messages one at a time", "err", err, "size", len(ds))
		return false
	}
	c.m.batchSize.Record(hctx, int64(len(ds)), c.attrSet)
	elapsed := time.Since(start).Seconds()
	for i, d := range ds {
		c.m.duration.Record(hctx, elapsed, c.attrSet)
		c.succeeded(trace.ContextWithSpan(hctx, spans[i]), d, outcomes[i], spans[i])
		spans[i].End()
	}
	return true
}

// errRefused wraps a failure the database gives any message's work (pgdb.Refused).
type errRefused struct{ err error }

func (e errRefused) Error() string { return e.err.Error() }
func (e errRefused) Unwrap() error { return e.err }

// deliver handles one delivery to its end: ack, reject or requeue; or, when a dependency
// of the handler is down, none of them: it returns the outage and leaves the message to
// the channel's close. When the database answers but refuses the work (pgdb.Refused),
// which a ping cannot see, it holds the delivery and tries it again after a pause, for
// as long as the refusal lasts: returned to the queue, the message would be delivered
// again into the same refusal, and each return would spend one of its deliveries.
// Readiness reports the refusal meanwhile. Only a shutdown ends the wait, with the
// delivery left to the channel's close.
func (c *Consumer) deliver(ctx context.Context, d amqp.Delivery) error {
	for tries := 1; ; tries++ {
		var refused errRefused
		err := c.deliverOnce(ctx, d)
		if !errors.As(err, &refused) {
			return err
		}
		if tries == 1 {
			c.holding.Add(1)
			defer c.holding.Add(-1)
			c.m.outages.Add(ctx, 1, c.attrSet)
			c.log.WarnContext(ctx, "the database refuses the work of any message; holding the delivery until it does not, the message is not at fault",
				"message_id", d.MessageId, "err", err)
		}
		why := err.Error()
		c.refusal.Store(&why)
		if !backoff.Sleep(ctx, backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, tries)) {
			return fmt.Errorf("%w: shutting down while the database refuses the work: %w", errOutage, err)
		}
	}
}

// deliverOnce is one try of deliver. The handler runs on a context that survives
// shutdown for a bounded time, so a SIGTERM lets the transaction in progress commit and
// be acked instead of being cut in half.
func (c *Consumer) deliverOnce(ctx context.Context, d amqp.Delivery) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.HandlerTimeout)
	defer cancel()
	hctx, span := c.startSpan(hctx, d)
	defer span.End()
	start := time.Now()
	log := c.log.With("message_id", d.MessageId, "type", d.Type)

	var outcome Outcome
	var err error
	for try := 1; ; try++ {
		outcome, err = c.process(hctx, d)
		if _, poison := event.IsPoison(err); err == nil || poison {
			break
		}
		if down := c.healthy(hctx); down != nil {
			span.SetStatus(codes.Error, "dependency down")
			span.RecordError(err)
			c.m.outages.Add(hctx, 1, c.attrSet)
			log.WarnContext(hctx, "handler failed while a dependency is down; pausing the consumer, the message is not at fault",
				"err", err, "dependency", down)
			return fmt.Errorf("%w (handler: %w)", down, err)
		}
		if pgdb.Refused(err) && !c.cfg.RequeueRefused {
			span.SetStatus(codes.Error, "database refuses the work")
			span.RecordError(err)
			return errRefused{err}
		}
		if try > c.cfg.InPlaceRetries || !pgdb.Transient(err) {
			break
		}
		c.m.inPlaceRetries.Add(hctx, 1, c.attrSet)
		log.InfoContext(hctx, "transient failure, retrying in place", "err", err, "try", try)
		backoff.Sleep(hctx, backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, try))
	}
	c.m.duration.Record(hctx, time.Since(start).Seconds(), c.attrSet)

	if reason, ok := event.IsPoison(err); ok {
		span.SetStatus(codes.Error, "poison")
		span.RecordError(err)
		c.forget(d.MessageId)
		c.m.poison.Add(hctx, 1, metric.WithAttributes(attribute.String("consumer", c.cfg.Name), attribute.String("reason", reason)))
		log.ErrorContext(hctx, "poison message dead-lettered", "reason", reason, "err", err)
		if err := d.Reject(false); err != nil {
			log.WarnContext(hctx, "reject failed; the broker will redeliver", "err", err)
		}
		return nil
	}
	if err != nil {
		span.SetStatus(codes.Error, "handler failed")
		span.RecordError(err)
		c.m.failures.Add(hctx, 1, c.attrSet)
		// The handler failed with its dependencies healthy: this message's own failure,
		// and one of its deliveries is spent. Hold it for a backoff first, so that a
		// message failing fast does not cycle through its delivery limit in a hot loop.
		delay := backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, c.fail(d.MessageId))
		log.WarnContext(hctx, "handler failed, requeueing", "err", err, "delay", delay, "delivery_count", deliveryCount(d))
		backoff.Sleep(ctx, delay)
		if err := d.Nack(false, true); err != nil {
			log.WarnContext(hctx, "nack failed; the broker will redeliver", "err", err)
		}
		return nil
	}
	c.succeeded(hctx, d, outcome, span)
	return nil
}

// startSpan starts the span of processing d, a child of the publisher's span whose
// trace context d's headers carry.
func (c *Consumer) startSpan(ctx context.Context, d amqp.Delivery) (context.Context, trace.Span) {
	ctx = telemetry.Propagator.Extract(ctx, headerCarrier(d.Headers))
	return c.tracer.Start(ctx, c.cfg.Queue+" process",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitmq,
			semconv.MessagingDestinationName(c.cfg.Queue),
			semconv.MessagingMessageID(d.MessageId),
			semconv.MessagingRabbitmqDestinationRoutingKey(d.RoutingKey),
			attribute.Int64("messaging.rabbitmq.delivery_count", deliveryCount(d)),
		))
}

// succeeded counts and acks a delivery whose work has committed.
func (c *Consumer) succeeded(ctx context.Context, d amqp.Delivery, outcome Outcome, span trace.Span) {
	log := c.log.With("message_id", d.MessageId, "type", d.Type)
	c.forget(d.MessageId)
	switch outcome {
	case Duplicate:
		c.m.duplicates.Add(ctx, 1, c.attrSet)
		span.SetAttributes(attribute.Bool("bookstore.duplicate", true))
		log.InfoContext(ctx, "duplicate skipped")
	default:
		c.m.processed.Add(ctx, 1, c.attrSet)
	}
	if err := d.Ack(false); err != nil {
		// The work is committed; the redelivery this causes will be a duplicate.
		log.WarnContext(ctx, "ack failed; the broker will redeliver", "err", err)
	}
}

// maxTracked bounds the failure counts kept; past it they start over, which only
// shortens some backoffs.
const maxTracked = 10_000

// fail counts one more failure of message id and returns the count.
func (c *Consumer) fail(id string) int {
	c.failedM.Lock()
	defer c.failedM.Unlock()
	if len(c.failed) >= maxTracked {
		clear(c.failed)
	}
	c.failed[id]++
	return c.failed[id]
}

func (c *Consumer) forget(id string) {
	c.failedM.Lock()
	defer c.failedM.Unlock()
	delete(c.failed, id)
}

func (c *Consumer) process(ctx context.Context, d amqp.Delivery) (Outcome, error) {
	env, err := c.decode(d)
	if err != nil {
		return 0, err
	}
	return c.handle(ctx, env)
}

// decode reads d's event; every error is poison.
func (c *Consumer) decode(d amqp.Delivery) (event.Envelope, error) {
	env, err := event.Decode(d.Body, c.cfg.Types...)
	if err != nil {
		return env, err
	}
	if d.MessageId != "" && d.MessageId != env.ID {
		return env, event.Poison(event.ReasonInvalidEnvelope, fmt.Errorf("message_id %q differs from event id %q", d.MessageId, env.ID))
	}
	return env, nil
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
	processed, duplicates, poison, redeliveries, failures, outages, inPlaceRetries, batchFallbacks metric.Int64Counter
	duration                                                                                       metric.Float64Histogram
	batchSize                                                                                      metric.Int64Histogram
}

func newMetrics(m metric.Meter, c *Consumer) (metrics, error) {
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
	out.failures = counter("bookstore.consumer.transient_failures", "Handler failures with healthy dependencies, requeued for another try: each spends a delivery.")
	out.outages = counter("bookstore.consumer.outages", "Handler failures while a dependency was down: the consumer paused, no delivery was spent on the message.")
	out.inPlaceRetries = counter("bookstore.consumer.in_place_retries", "Transient failures (deadlock, serialization, dropped connection) retried without requeueing.")
	out.batchFallbacks = counter("bookstore.consumer.batch_fallbacks", "Batches rolled back and handled one message at a time (a duplicate, a poison message or a failure inside).")
	var err error
	out.batchSize, err = m.Int64Histogram("bookstore.consumer.batch_size", metric.WithDescription("Messages handled together in one committed batch."),
		metric.WithExplicitBucketBoundaries(2, 4, 8, 16, 32, 64))
	errs = append(errs, err)
	consuming, err := m.Int64ObservableGauge("bookstore.consumer.consuming", metric.WithDescription("1 while the consumer is consuming its queue, 0 while it is paused or reconnecting."))
	errs = append(errs, err)
	if err == nil {
		_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			v := int64(0)
			if c.Ready(context.Background()) == nil {
				v = 1
			}
			o.ObserveInt64(consuming, v, c.attrSet)
			return nil
		}, consuming)
		errs = append(errs, err)
	}
	out.duration, err = m.Float64Histogram("bookstore.consumer.handler_duration", metric.WithUnit("s"),
		metric.WithDescription("Time from delivery to ack, reject or requeue."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("consumer metrics: %w", err)
	}
	return out, nil
}
