package wrongways

import (
	"context"
	"errors"

	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// RefusalsAsFailures wraps handle so that a failure the database gives any message's
// work (pgdb.Refused: a privilege revoked, an undefined table, a read-only standby)
// reaches the consumer as the message's own: its text kept, its cause hidden. The
// consumer can no longer tell the refusal from a bad message, and instead of holding the
// delivery until the database takes the work it requeues it, spending one of its
// deliveries each time, until the queue's delivery limit dead-letters a valid message.
// This is what a consumer whose only health check is a ping does: the database answers
// the ping.
func RefusalsAsFailures(handle consumer.Handler) consumer.Handler {
	return func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		outcome, err := handle(ctx, env)
		if _, poison := event.IsPoison(err); err != nil && !poison && pgdb.Refused(err) {
			return outcome, errors.New(err.Error())
		}
		return outcome, err
	}
}
