package main

import (
	"context"
	"encoding/json"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// directPublisher publishes an event the moment its order commits, with no outbox: the
// design of ORDERING_PUBLISHER=direct, which the chaos run shows losing orders.
type directPublisher struct{ pub *broker.Publisher }

func (d directPublisher) PublishNow(ctx context.Context, env event.Envelope) error {
	body, err := json.Marshal(env)
	if err != nil {
		return err
	}
	msg := broker.Message{RoutingKey: env.Type, Publishing: amqp.Publishing{
		MessageId: env.ID, Type: env.Type, ContentType: event.ContentType, AppId: "ordering", Body: body,
	}}
	return d.pub.PublishBatch(ctx, []broker.Message{msg})[0]
}
