package consumer

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

type metrics struct {
	processed, duplicates, poison, redeliveries, failures, outages, inPlaceRetries, batchFallbacks metric.Int64Counter
	duration                                                                                       metric.Float64Histogram
	batchSize                                                                                      metric.Int64Histogram
}

func newMetrics(m metric.Meter, c *Consumer) (metrics, error) {
	in := telemetry.NewInstruments(m)
	out := metrics{
		processed:      in.Counter("bookstore.consumer.processed", "Messages processed and committed."),
		duplicates:     in.Counter("bookstore.consumer.duplicates", "Messages acked as duplicates of one already processed."),
		poison:         in.Counter("bookstore.consumer.poison", "Messages dead-lettered as poison, by reason."),
		redeliveries:   in.Counter("bookstore.consumer.redeliveries", "Deliveries the broker marked as redelivered."),
		failures:       in.Counter("bookstore.consumer.transient_failures", "Handler failures with healthy dependencies, requeued for another try: each spends a delivery."),
		outages:        in.Counter("bookstore.consumer.outages", "Handler failures while a dependency was down: the consumer paused, no delivery was spent on the message."),
		inPlaceRetries: in.Counter("bookstore.consumer.in_place_retries", "Transient failures (deadlock, serialization, dropped connection) retried without requeueing."),
		batchFallbacks: in.Counter("bookstore.consumer.batch_fallbacks", "Batches rolled back and handled one message at a time (a duplicate, a poison message or a failure inside)."),
		batchSize: in.Int64Histogram("bookstore.consumer.batch_size", "Messages handled together in one committed batch.",
			metric.WithExplicitBucketBoundaries(2, 4, 8, 16, 32, 64)),
		duration: in.Float64Histogram("bookstore.consumer.handler_duration", "Time from delivery to ack, reject or requeue.", metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)),
	}
	consuming := in.Int64Gauge("bookstore.consumer.consuming", "1 while the consumer is consuming its queue, 0 while it is paused or reconnecting.")
	if err := in.Err("consumer"); err != nil {
		return out, err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if c.Ready(context.Background()) == nil {
			v = 1
		}
		o.ObserveInt64(consuming, v, c.attrSet)
		return nil
	}, consuming)
	if err != nil {
		return out, fmt.Errorf("consumer metrics: %w", err)
	}
	return out, nil
}
