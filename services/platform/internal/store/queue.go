package store

// Not generated: sqlc's :batchexec sends a batch of one query, run once per argument, and
// a use case that sends its whole transaction as one batch needs its outbox row queued
// beside its own inserts (ordering's store/queue.go does the same for those).

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// QueueInsertOutbox queues InsertOutbox on b: it sends exactly what the generated method
// sends, because it calls that method, on a DBTX whose Exec only queues. The insert's
// outcome is b's result for it.
func QueueInsertOutbox(b *pgx.Batch, arg InsertOutboxParams) {
	_ = New(queue{b}).InsertOutbox(context.Background(), arg)
}

// queue is a DBTX whose Exec queues the statement on a batch and reports nothing: the
// statement's outcome comes from the batch. Only :exec queries go through it.
type queue struct{ b *pgx.Batch }

func (q queue) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (queue) Query(context.Context, string, ...any) (pgx.Rows, error) {
	panic("store: only :exec queries can be queued")
}

func (queue) QueryRow(context.Context, string, ...any) pgx.Row {
	panic("store: only :exec queries can be queued")
}
