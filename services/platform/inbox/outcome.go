package inbox

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/event"
)

// Outcome is what a handler did with a message it accepted, as the consumer counts it.
type Outcome int

const (
	// Processed: the work was done and committed.
	Processed Outcome = iota + 1
	// Duplicate: the message had been processed before; nothing was done. A success.
	Duplicate
)

// Message is one delivery of a batch: its event, and the span that processes it, which
// the events its work causes continue (outbox.Event.Cause).
type Message struct {
	Envelope event.Envelope
	Span     trace.SpanContext
}

// Settle is what a handler reports of a message it gave to Process, from Process's
// result: Process's error; else the error of afterCommit, the step between the commit
// and the ack where a crash is tried (a failpoint, a test's hook); else Duplicate for a
// message processed before and Processed for one processed now. afterCommit runs for a
// duplicate too, since the window between commit and ack is there either way.
func Settle(ctx context.Context, processed bool, err error, afterCommit func(context.Context) error) (Outcome, error) {
	if err != nil {
		return 0, err
	}
	if err := afterCommit(ctx); err != nil {
		return 0, err
	}
	if !processed {
		return Duplicate, nil
	}
	return Processed, nil
}
