package broker

import (
	"encoding/json"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/event"
)

// EventPublishing is the AMQP message of an event whose envelope bytes are body: the
// envelope's id as message_id (what the inbox keys on), its type as type, the CloudEvents
// content type, the producing service as app_id, persistent. The relay builds its
// messages with it from the bytes stored in the outbox, so a republished event is the
// same bytes as the first publish.
func EventPublishing(id, typ, appID string, created time.Time, body []byte) amqp.Publishing {
	return amqp.Publishing{
		MessageId:    id,
		Type:         typ,
		ContentType:  event.ContentType,
		AppId:        appID,
		Timestamp:    created,
		DeliveryMode: amqp.Persistent,
		Body:         body,
	}
}

// EventMessage marshals env and returns its message, routed by its type, as appID
// publishes it.
func EventMessage(env event.Envelope, appID string) (Message, error) {
	body, err := json.Marshal(env)
	if err != nil {
		return Message{}, err
	}
	return Message{RoutingKey: env.Type, Publishing: EventPublishing(env.ID, env.Type, appID, env.Time, body)}, nil
}
