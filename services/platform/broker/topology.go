package broker

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Names of the contracts' topology.
const (
	Exchange           = "bookstore.events"
	DeadLetterExchange = "bookstore.dlx"

	QueueInventoryOrderPlaced   = "inventory.order-placed"
	QueueOrderingStockEvents    = "ordering.stock-events"
	QueueNotificationStockEvent = "notification.stock-events"
)

// DeliveryLimit is each queue's x-delivery-limit: how often a message may be delivered
// before RabbitMQ dead-letters it. Only a message's own failures spend it: a consumer whose
// database is down stops consuming instead of requeueing (package consumer), so an outage
// of any length costs a message at most one return. Fifty deliveries, each after a
// backoff, is then a message that keeps failing while everything it needs is healthy; a
// message that can never succeed is rejected at its first delivery and does not wait for
// the limit.
const DeliveryLimit = 50

// Queue is one consuming service's queue and the event types bound to it.
type Queue struct {
	Name     string
	Bindings []string
}

// DLQ is the name of the queue's dead-letter queue.
func (q Queue) DLQ() string { return q.Name + ".dlq" }

// Queues is the queue table of the contracts.
var Queues = []Queue{
	{Name: QueueInventoryOrderPlaced, Bindings: []string{"ordering.order-placed.v1"}},
	{Name: QueueOrderingStockEvents, Bindings: []string{"inventory.stock-reserved.v1", "inventory.stock-rejected.v1"}},
	{Name: QueueNotificationStockEvent, Bindings: []string{"inventory.stock-reserved.v1", "inventory.stock-rejected.v1"}},
}

// QueueArgs are the arguments every queue is declared with. A queue declared twice with
// different arguments is an error in RabbitMQ, so the services, the definitions file of
// docker compose and the tests all take them from here.
func QueueArgs(q Queue) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "quorum",
		"x-delivery-limit":          DeliveryLimit,
		"x-dead-letter-exchange":    DeadLetterExchange,
		"x-dead-letter-routing-key": q.Name,
	}
}

// DLQArgs are the arguments of every dead-letter queue.
func DLQArgs() amqp.Table { return amqp.Table{"x-queue-type": "quorum"} }

// DeclareTopology declares the exchanges, queues, dead-letter queues and bindings of the
// contracts. Declarations are idempotent, so every service runs this on start: whichever
// starts first, no event is published to an exchange with no queue behind it.
func DeclareTopology(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(Exchange, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", Exchange, err)
	}
	if err := ch.ExchangeDeclare(DeadLetterExchange, "direct", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", DeadLetterExchange, err)
	}
	for _, q := range Queues {
		if _, err := ch.QueueDeclare(q.DLQ(), true, false, false, false, DLQArgs()); err != nil {
			return fmt.Errorf("declare queue %s: %w", q.DLQ(), err)
		}
		if err := ch.QueueBind(q.DLQ(), q.Name, DeadLetterExchange, false, nil); err != nil {
			return fmt.Errorf("bind %s: %w", q.DLQ(), err)
		}
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, QueueArgs(q)); err != nil {
			return fmt.Errorf("declare queue %s: %w", q.Name, err)
		}
		for _, key := range q.Bindings {
			if err := ch.QueueBind(q.Name, key, Exchange, false, nil); err != nil {
				return fmt.Errorf("bind %s to %s: %w", q.Name, key, err)
			}
		}
	}
	return nil
}
