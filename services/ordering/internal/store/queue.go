package store

// Not generated: sqlc's :batchexec sends a batch of one query, run once per argument, and
// placing an order needs three different inserts in one round trip.

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The Queue functions put an :exec query on a pgx.Batch instead of running it, so that
// several go to Postgres in one round trip: tx.SendBatch(ctx, b).Close() then runs them
// in order and returns the first error. Each sends exactly what the generated method of
// its name sends, because it calls that method, on a DBTX whose Exec only queues.

// QueueInsertOrder queues InsertOrder on b.
func QueueInsertOrder(b *pgx.Batch, arg InsertOrderParams) {
	_ = New(queue{b}).InsertOrder(context.Background(), arg)
}

// QueueInsertOrderLines queues InsertOrderLines on b.
func QueueInsertOrderLines(b *pgx.Batch, arg InsertOrderLinesParams) {
	_ = New(queue{b}).InsertOrderLines(context.Background(), arg)
}

// QueueInsertIdempotencyKey queues InsertIdempotencyKey on b.
func QueueInsertIdempotencyKey(b *pgx.Batch, arg InsertIdempotencyKeyParams) {
	_ = New(queue{b}).InsertIdempotencyKey(context.Background(), arg)
}

// QueueInsertOrderHistory queues InsertOrderHistory on b.
func QueueInsertOrderHistory(b *pgx.Batch, arg InsertOrderHistoryParams) {
	_ = New(queue{b}).InsertOrderHistory(context.Background(), arg)
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
