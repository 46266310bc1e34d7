package wrongways

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// ConsumeAckingFirst consumes queue on ch with automatic acknowledgement: the broker
// counts each message acked the moment it sends it, before handle has even started, so
// the message is the consumer's alone from then on. It hands each delivery, decoded as
// one of types, to handle, until handle fails or ctx ends, and returns handle's error as
// a process would die of it. A crash before the work commits then loses the message: the
// broker has nothing left to deliver again. The right consumer (package consumer) acks
// only after its handler's transaction committed.
func ConsumeAckingFirst(ctx context.Context, ch *amqp.Channel, queue string, types []string, handle consumer.Handler) error {
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("consume %s: the channel closed", queue)
			}
			env, err := event.Decode(d.Body, types...)
			if err != nil {
				return err
			}
			if _, err := handle(ctx, env); err != nil {
				return fmt.Errorf("message %s, acked when it arrived: %w", env.ID, err)
			}
		}
	}
}
