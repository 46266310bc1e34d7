package store

// Not generated: sqlc's :batchexec sends a batch of one query, run once per argument, and
// placing an order needs three different inserts in one round trip.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// The Queue functions put an :exec query on a pgx.Batch instead of running it, so that
// several go to Postgres in one round trip: tx.SendBatch(ctx, b).Close() then runs them
// in order and returns the first error. Each sends exactly what the generated method of
// its name sends, because it calls that method, on pgdb.Queue, a DBTX whose Exec only
// queues.

// QueueInsertOrder queues InsertOrder on b.
func QueueInsertOrder(b *pgx.Batch, arg InsertOrderParams) {
	_ = New(pgdb.Queue{Batch: b}).InsertOrder(context.Background(), arg)
}

// QueueInsertOrderLines queues InsertOrderLines on b.
func QueueInsertOrderLines(b *pgx.Batch, arg InsertOrderLinesParams) {
	_ = New(pgdb.Queue{Batch: b}).InsertOrderLines(context.Background(), arg)
}

// QueueInsertIdempotencyKey queues InsertIdempotencyKey on b.
func QueueInsertIdempotencyKey(b *pgx.Batch, arg InsertIdempotencyKeyParams) {
	_ = New(pgdb.Queue{Batch: b}).InsertIdempotencyKey(context.Background(), arg)
}

// QueueInsertOrderHistory queues InsertOrderHistory on b.
func QueueInsertOrderHistory(b *pgx.Batch, arg InsertOrderHistoryParams) {
	_ = New(pgdb.Queue{Batch: b}).InsertOrderHistory(context.Background(), arg)
}
