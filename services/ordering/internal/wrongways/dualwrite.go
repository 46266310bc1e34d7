package wrongways

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// CommitThenPublish is the dual write, the Events of ORDERING_PUBLISHER=direct: nothing
// of the event is in the change's transaction, and it is published once the change has
// committed. If the process dies in between, or the broker is down, the event is gone
// for good, nothing says it was due, and the order stays pending for ever. The outbox
// exists to prevent exactly this (docs/outbox.md).
type CommitThenPublish struct {
	Pub *broker.Publisher
	// BeforePublish, when set, runs between the commit and the publish; its error stands
	// for the process dying there, and the event is not published.
	BeforePublish func(context.Context) error
}

// InTx writes nothing.
func (CommitThenPublish) InTx(context.Context, pgx.Tx, event.Envelope) error { return nil }

// Committed publishes env and waits for the broker's confirm.
func (w CommitThenPublish) Committed(ctx context.Context, env event.Envelope) error {
	if w.BeforePublish != nil {
		if err := w.BeforePublish(ctx); err != nil {
			return err
		}
	}
	return Publish(ctx, w.Pub, env)
}

// Publish sends env as ordering's relay does, to the events exchange with the type as
// its routing key, and waits for the broker's confirm.
func Publish(ctx context.Context, pub *broker.Publisher, env event.Envelope) error {
	msg, err := broker.EventMessage(env, "ordering")
	if err != nil {
		return err
	}
	return pub.PublishBatch(ctx, []broker.Message{msg})[0]
}
