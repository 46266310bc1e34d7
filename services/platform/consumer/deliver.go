package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

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

	var outcome inbox.Outcome
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
		if pgdb.Refused(err) {
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
		c.m.poison.Add(hctx, 1, metric.WithAttributes(attribute.String("consumer", c.cfg.Name),
			attribute.String("queue", c.cfg.Queue), attribute.String("reason", reason)))
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
		c.requeue(hctx, ctx, d, err)
		return nil
	}
	c.succeeded(hctx, d, outcome, span)
	return nil
}

// requeue returns a delivery whose handler failed with its dependencies healthy to its
// queue, or dead-letters it past MaxFailures: the message's own failure, which spends one
// of its deliveries. It holds the delivery for a
// backoff first, so that a message failing fast does not run through its delivery limit
// in a hot loop.
//
// The return is basic.reject with requeue, never basic.nack: RabbitMQ 4.3 counts a
// quorum queue's delivery limit on the deliveries that a reject, a closed channel or a
// lost connection returns, but no longer on those a nack returns, so a message requeued
// by nack would fail for ever and never reach its dead-letter queue. RabbitMQ 3.10 counts
// both. In case a broker counts none (a policy's higher limit, another version's rules),
// the consumer keeps its own count too: past MaxFailures it dead-letters the message
// itself.
func (c *Consumer) requeue(hctx, ctx context.Context, d amqp.Delivery, err error) {
	log := c.log.With("message_id", d.MessageId, "type", d.Type)
	failures := c.fail(d.MessageId)
	if failures > c.cfg.MaxFailures {
		c.forget(d.MessageId)
		log.ErrorContext(hctx, "handler failed more often than the consumer allows; dead-lettering the message",
			"err", err, "failures", failures, "delivery_count", deliveryCount(d))
		if err := d.Reject(false); err != nil {
			log.WarnContext(hctx, "reject failed; the broker will redeliver", "err", err)
		}
		return
	}
	delay := backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, failures)
	log.WarnContext(hctx, "handler failed, requeueing", "err", err, "delay", delay, "delivery_count", deliveryCount(d))
	backoff.Sleep(ctx, delay)
	if err := d.Reject(true); err != nil {
		log.WarnContext(hctx, "requeue failed; the broker will redeliver", "err", err)
	}
}

// succeeded counts and acks a delivery whose work has committed.
func (c *Consumer) succeeded(ctx context.Context, d amqp.Delivery, outcome inbox.Outcome, span trace.Span) {
	log := c.log.With("message_id", d.MessageId, "type", d.Type)
	c.forget(d.MessageId)
	switch outcome {
	case inbox.Duplicate:
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

func (c *Consumer) process(ctx context.Context, d amqp.Delivery) (inbox.Outcome, error) {
	env, err := c.decode(d)
	if err != nil {
		return 0, err
	}
	return c.handle(ctx, env)
}

// decode reads d's event; every error is poison. A body over the size limit, or of
// another content type than the events', is refused before it is parsed: whoever could
// publish it (a producer's bug, or anyone holding a broker user) would otherwise have the
// consumer parse, store and republish it, and its handler write it into the database.
//
// Before the gate, the delivery must come from the queue's producer (Config.Producer):
// anyone else who can publish on the exchange, an administrator's login or another
// service's user, could otherwise have the consumer act on an event its producer never
// sent.
func (c *Consumer) decode(d amqp.Delivery) (event.Envelope, error) {
	replay := d.Exchange == "" // straight into the queue: an operator's dlq replay
	if !replay && d.UserId != c.cfg.Producer {
		return event.Envelope{}, event.Poison(event.ReasonProducer, fmt.Errorf("published by broker user %s, want %q", event.Truncate(d.UserId), c.cfg.Producer))
	}
	if err := admit(d, c.cfg.MaxMessageSize); err != nil {
		return event.Envelope{}, err
	}
	env, err := event.Decode(d.Body, c.cfg.Types...)
	if err != nil {
		return env, err
	}
	if d.MessageId != "" && d.MessageId != env.ID {
		return env, event.Poison(event.ReasonInvalidEnvelope, fmt.Errorf("message_id %q differs from event id %q", d.MessageId, env.ID))
	}
	if !replay && d.RoutingKey != env.Type && d.RoutingKey != broker.QueueKey(env.Type, c.cfg.Queue) {
		return env, event.Poison(event.ReasonRoutingKey, fmt.Errorf("routed under %s, its type is %q", event.Truncate(d.RoutingKey), env.Type))
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

// admit is the gate before decoding: a body of at most max bytes (DefaultMaxMessageSize
// when max is 0) whose content type is event.ContentType, as every producer's
// broker.EventPublishing sets it. A message without one is refused too: a body that only
// looks like JSON is not yet an event. Its error is poison, with a reason from a fixed set
// (the metric's label), and it quotes none of the message.
func admit(d amqp.Delivery, max int) error {
	if max <= 0 {
		max = DefaultMaxMessageSize
	}
	if len(d.Body) > max {
		return event.Poison(event.ReasonTooLarge, fmt.Errorf("%d bytes, over the %d this consumer reads", len(d.Body), max))
	}
	if !event.IsContentType(d.ContentType) {
		return event.Poison(event.ReasonContentType, fmt.Errorf("content type %s, want %s", event.Truncate(d.ContentType), event.ContentType))
	}
	return nil
}
