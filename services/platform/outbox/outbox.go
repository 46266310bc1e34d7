// Package outbox closes the dual-write gap between a service's database and the broker.
//
// Without it a service commits its change and then publishes, and a crash between the two
// leaves a change that nobody hears about (eShopOnContainers' events stuck "NotPublished").
// With it the change and the event are written in one transaction (Write), and a Relay
// publishes committed events afterwards, marking each only after the broker confirms it.
// The window that remains is the other way round: a crash after the confirm and before
// the mark publishes an event twice. That is why every consumer is idempotent (package
// inbox), and why an event's id is made once, here, and never again.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Event is a domain change to announce: which aggregate changed, to which version, and
// the event's data.
type Event struct {
	Source        string // the CloudEvents source: the producing service
	Type          string // the event type, which is its routing key
	AggregateType string // "order"
	AggregateID   string
	Sequence      int64 // the aggregate's version after the change: 1 for its first event
	Data          any
	// Cause is the span whose trace the event continues; zero: the span of the ctx given
	// to Write. WriteAll needs it: one batch writes the events of several traces.
	Cause trace.SpanContext
}

// Write stores e in the outbox inside tx, the transaction that also writes the change it
// announces. It returns the envelope, whose id is now fixed for every publish to come.
// The trace context of ctx is stored with the row, so the relay's publish span, seconds
// or hours later and maybe in another process, joins the trace of the request.
func Write(ctx context.Context, tx pgx.Tx, e Event) (event.Envelope, error) {
	env, row, err := prepare(ctx, e)
	if err != nil {
		return env, err
	}
	if err := store.New(tx).InsertOutbox(ctx, row); err != nil {
		return env, fmt.Errorf("outbox: insert %s: %w", e.Type, err)
	}
	return env, nil
}

// QueueWrite is Write for a transaction sent as one pgx.Batch: it queues e's outbox row
// on b, after what b already holds, and returns the envelope. The row is written when b
// is sent, in the transaction b runs in, and b's result for it is the insert's.
func QueueWrite(ctx context.Context, b *pgx.Batch, e Event) (event.Envelope, error) {
	env, row, err := prepare(ctx, e)
	if err != nil {
		return env, err
	}
	store.QueueInsertOutbox(b, row)
	return env, nil
}

// WriteAll is Write for several events in one statement, for a transaction that does
// the work of several messages at once.
func WriteAll(ctx context.Context, tx pgx.Tx, events []Event) error {
	var rows store.InsertOutboxBatchParams
	for _, e := range events {
		_, row, err := prepare(ctx, e)
		if err != nil {
			return err
		}
		rows.Ids = append(rows.Ids, row.ID)
		rows.AggregateTypes = append(rows.AggregateTypes, row.AggregateType)
		rows.AggregateIds = append(rows.AggregateIds, row.AggregateID)
		rows.Sequences = append(rows.Sequences, row.Sequence)
		rows.EventTypes = append(rows.EventTypes, row.EventType)
		rows.SchemaVersions = append(rows.SchemaVersions, row.SchemaVersion)
		rows.Envelopes = append(rows.Envelopes, string(row.Envelope))
		rows.Traceparents = append(rows.Traceparents, row.Traceparent)
		rows.Tracestates = append(rows.Tracestates, row.Tracestate)
	}
	if err := store.New(tx).InsertOutboxBatch(ctx, rows); err != nil {
		return fmt.Errorf("outbox: insert %d events: %w", len(events), err)
	}
	return nil
}

// prepare makes e's envelope, its id and trace context included, and its outbox row.
func prepare(ctx context.Context, e Event) (event.Envelope, store.InsertOutboxParams, error) {
	env, err := event.New(e.Source, e.Type, e.AggregateID, e.Sequence, e.Data)
	if err != nil {
		return env, store.InsertOutboxParams{}, err
	}
	if e.Cause.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, e.Cause)
	}
	carrier := propagation.MapCarrier{}
	telemetry.Propagator.Inject(ctx, carrier)
	env.TraceParent, env.TraceState = carrier.Get("traceparent"), carrier.Get("tracestate")

	body, err := json.Marshal(env)
	if err != nil {
		return env, store.InsertOutboxParams{}, fmt.Errorf("outbox: marshal envelope: %w", err)
	}
	return env, store.InsertOutboxParams{
		ID:            env.UUID(),
		AggregateType: e.AggregateType,
		AggregateID:   e.AggregateID,
		Sequence:      e.Sequence,
		EventType:     e.Type,
		SchemaVersion: SchemaVersion(e.Type),
		Envelope:      body,
		Traceparent:   env.TraceParent,
		Tracestate:    env.TraceState,
	}, nil
}

// SchemaVersion reads the version from an event type's ".vN" suffix; 0 when it has none.
func SchemaVersion(eventType string) int32 {
	i := strings.LastIndex(eventType, ".v")
	if i < 0 {
		return 0
	}
	v, err := strconv.ParseInt(eventType[i+2:], 10, 32)
	if err != nil {
		return 0
	}
	return int32(v)
}
