package pgdb

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Queue is a DBTX, the interface sqlc's generated code runs its queries on, whose Exec
// puts the statement on a batch instead of running it: a generated :exec method called on
// it queues exactly what it would send, and several go to Postgres in one round trip
// (SendBatch runs them in order). The outcome of each is the batch's result for it; Exec
// reports nothing. Only :exec queries can be queued: Query and QueryRow panic.
type Queue struct{ Batch *pgx.Batch }

// Exec queues sql with args on q's batch.
func (q Queue) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.Batch.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// Query panics: a query that returns rows cannot be queued blind.
func (Queue) Query(context.Context, string, ...any) (pgx.Rows, error) {
	panic("pgdb: only :exec queries can be queued")
}

// QueryRow panics: a query that returns rows cannot be queued blind.
func (Queue) QueryRow(context.Context, string, ...any) pgx.Row {
	panic("pgdb: only :exec queries can be queued")
}
