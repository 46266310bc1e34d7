package apitest

import (
	"encoding/json"
	"errors"
	"fmt"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
)

// ContentType is the AMQP content type of every event: CloudEvents in structured JSON mode.
const ContentType = "application/cloudevents+json"

// ValidateEvent checks one event body: a CloudEvent by the CloudEvents Go SDK, an
// envelope by schemas/cloudevent.json, and its data by the schema of its type and
// version (schemas/<type>.json). A type without a schema is an error: every event
// Bookstore publishes has one.
func ValidateEvent(body []byte) error {
	c, err := Load()
	if err != nil {
		return err
	}
	ce := cloudevents.New()
	if err := json.Unmarshal(body, &ce); err != nil {
		return fmt.Errorf("not a CloudEvent (CloudEvents SDK): %w", err)
	}
	if err := ce.Validate(); err != nil {
		return fmt.Errorf("CloudEvents SDK: %w", err)
	}
	v, err := jsonValue(body)
	if err != nil {
		return err
	}
	if err := c.Envelope.Validate(v); err != nil {
		return fmt.Errorf("envelope does not match schemas/cloudevent.json: %#v", err)
	}
	schema, ok := c.Data[ce.Type()]
	if !ok {
		return fmt.Errorf("type %q has no schema in api/schemas", ce.Type())
	}
	if err := schema.Validate(v.(map[string]any)["data"]); err != nil {
		return fmt.Errorf("data of %s does not match schemas/%s.json: %#v", ce.Type(), ce.Type(), err)
	}
	return nil
}

// ValidateMessage is ValidateEvent for an AMQP message, with the properties the contract
// sets: content type, message_id = the envelope's id, type = the envelope's type.
func ValidateMessage(contentType, messageID, typ string, body []byte) error {
	var errs []error
	if contentType != ContentType {
		errs = append(errs, fmt.Errorf("content_type %q, want %q", contentType, ContentType))
	}
	var env struct{ ID, Type string }
	if err := json.Unmarshal(body, &env); err == nil {
		if messageID != env.ID {
			errs = append(errs, fmt.Errorf("message_id %q is not the envelope's id %q", messageID, env.ID))
		}
		if typ != env.Type {
			errs = append(errs, fmt.Errorf("AMQP type %q is not the envelope's type %q", typ, env.Type))
		}
	}
	if err := ValidateEvent(body); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// HasSchema reports whether typ is an event type of the contracts (it has a data schema).
func HasSchema(typ string) bool {
	c, err := Load()
	if err != nil {
		return false
	}
	_, ok := c.Data[typ]
	return ok
}
