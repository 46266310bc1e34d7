package ops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/ops/internal/store"
)

// A row whose publish failed outbox.Config.MaxAttempts times is parked as dead, and the
// relay never looks at it again. That costs more than the one event: the relay publishes an
// aggregate's events in sequence, so every later event of the same aggregate waits
// behind the dead row, and the order it announces never gets an answer. Only an operator
// brings it back, once the cause (a missing binding, a broker that refused it) is fixed:
// ListDeadRows shows what is parked and RetryDeadRows returns it to the relay.

// ErrNotDead is returned by RetryDeadRows for an id that is not a dead row (unknown, or
// pending or published already). Nothing is retried then.
var ErrNotDead = errors.New("not a dead outbox row")

// DeadRow is an outbox row the relay parked.
type DeadRow struct {
	ID            uuid.UUID // the event id
	EventType     string
	AggregateType string
	AggregateID   string
	Sequence      int64
	Attempts      int
	LastError     string
	CreatedAt     time.Time
	Blocked       int64 // later events of the same aggregate waiting behind this row
}

// ListDeadRows returns the dead outbox rows in write order.
func ListDeadRows(ctx context.Context, pool *pgxpool.Pool) ([]DeadRow, error) {
	rows, err := store.New(pool).ListDeadOutbox(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: list dead rows: %w", err)
	}
	out := make([]DeadRow, len(rows))
	for i, r := range rows {
		out[i] = DeadRow{
			ID: r.ID, EventType: r.EventType, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
			Sequence: r.Sequence, Attempts: int(r.Attempts), CreatedAt: r.CreatedAt, Blocked: r.Blocked,
		}
		if r.LastError != nil {
			out[i].LastError = *r.LastError
		}
	}
	return out, nil
}

// RetryDeadRows returns dead outbox rows to the relay: all of them, or those of ids. Each becomes
// pending with its attempts at zero (a full budget again, not one last try), claimable at
// once, and the relays are woken at commit. It returns how many rows it moved. An id that
// is not a dead row fails the call and moves nothing.
//
// Publishing an event again is safe even if an earlier attempt did reach the broker (a
// confirm that timed out after the broker had the message): it keeps its id, and every
// consumer drops the copy in its inbox.
func RetryDeadRows(ctx context.Context, pool *pgxpool.Pool, ids ...uuid.UUID) (int64, error) {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	ids = slices.Compact(ids)
	var moved []uuid.UUID
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		var err error
		if len(ids) == 0 {
			moved, err = q.RetryAllDeadOutbox(ctx)
		} else {
			moved, err = q.RetryDeadOutbox(ctx, ids)
		}
		if err != nil {
			return err
		}
		if missing := notIn(ids, moved); len(missing) > 0 {
			return fmt.Errorf("%w: %s", ErrNotDead, strings.Join(missing, ", "))
		}
		if len(moved) == 0 {
			return nil
		}
		return q.NotifyOutbox(ctx)
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: retry dead rows: %w", err)
	}
	return int64(len(moved)), nil
}

// notIn lists the ids missing from got.
func notIn(ids, got []uuid.UUID) []string {
	var missing []string
	for _, id := range ids {
		if !slices.Contains(got, id) {
			missing = append(missing, id.String())
		}
	}
	return missing
}
