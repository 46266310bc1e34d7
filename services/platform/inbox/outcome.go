package inbox

import (
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
