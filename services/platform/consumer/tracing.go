package consumer

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

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
