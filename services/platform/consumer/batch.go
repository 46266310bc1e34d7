package consumer

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

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
	msgs := make([]inbox.Message, 0, len(ds))
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
		msgs = append(msgs, inbox.Message{Envelope: env, Span: span.SpanContext()})
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
