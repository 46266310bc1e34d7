package main

import (
	"context"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// directPublisher publishes an event the moment its order commits, with no outbox: the
// design of ORDERING_PUBLISHER=direct, which the chaos run shows losing orders.
type directPublisher struct{ pub *broker.Publisher }

func (d directPublisher) PublishNow(ctx context.Context, env event.Envelope) error {
	msg, err := broker.EventMessage(env, "ordering")
	if err != nil {
		return err
	}
	return d.pub.PublishBatch(ctx, []broker.Message{msg})[0]
}
