package main

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// directWriter is the event writer of ORDERING_PUBLISHER=direct: no outbox row, the event
// is published the moment its order commits. That is the dual write the outbox exists to
// prevent: if the process dies after the commit or the broker is down, the event is gone
// for good and the order stays pending forever. Never the default; see docs/outbox.md.
type directWriter struct {
	pub *broker.Publisher
	log *slog.Logger
}

// Write only makes the envelope: nothing of the event is in the order's transaction.
func (d directWriter) Write(_ context.Context, _ pgx.Tx, e outbox.Event) (event.Envelope, error) {
	return event.New(e.Source, e.Type, e.AggregateID, e.Sequence, e.Data)
}

// Committed publishes env, and on failure logs that it is lost.
func (d directWriter) Committed(ctx context.Context, env event.Envelope) {
	if err := d.publish(ctx, env); err != nil {
		d.log.ErrorContext(ctx, "direct publish failed: the event is lost", "event_id", env.ID, "err", err)
	}
}

func (d directWriter) publish(ctx context.Context, env event.Envelope) error {
	msg, err := broker.EventMessage(env, "ordering")
	if err != nil {
		return err
	}
	return d.pub.PublishBatch(ctx, []broker.Message{msg})[0]
}
