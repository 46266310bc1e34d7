package outbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/platform/internal/store"
)

// AggregateEvent is where one event of an aggregate stands in its producer's outbox: when
// it was written (in the transaction that changed the aggregate) and when the relay
// published it. It is what a read endpoint shows of the outbox, such as ordering's GET
// /orders/{id}/events; a row the cleanup has deleted (published long ago) is not shown.
type AggregateEvent struct {
	ID          uuid.UUID  `json:"id"`
	Type        string     `json:"type"`
	Sequence    int64      `json:"sequence"`
	State       string     `json:"state"` // pending, published or dead
	Attempts    int        `json:"attempts"`
	TraceID     string     `json:"trace_id,omitempty"` // of the request that wrote it, from its traceparent
	CreatedAt   time.Time  `json:"created_at"`
	PublishedAt *time.Time `json:"published_at"`
}

// ForAggregate returns the outbox rows of one aggregate in sequence order, [] when it has
// none.
func ForAggregate(ctx context.Context, db store.DBTX, aggregateType, aggregateID string) ([]AggregateEvent, error) {
	rows, err := store.New(db).ListOutboxForAggregate(ctx, store.ListOutboxForAggregateParams{
		AggregateType: aggregateType, AggregateID: aggregateID,
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: events of %s %s: %w", aggregateType, aggregateID, err)
	}
	out := make([]AggregateEvent, len(rows))
	for i, r := range rows {
		out[i] = AggregateEvent{
			ID: r.ID, Type: r.EventType, Sequence: r.Sequence, State: r.State, Attempts: int(r.Attempts),
			TraceID: traceID(r.Traceparent), CreatedAt: r.CreatedAt, PublishedAt: r.PublishedAt,
		}
	}
	return out, nil
}

// traceID is the trace-id field of a W3C traceparent (version-traceid-parentid-flags), ""
// when there is none.
func traceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	return parts[1]
}
