package store

// Not generated: sqlc's :batchexec sends a batch of one query, run once per argument, and
// a use case that sends its whole transaction as one batch needs its outbox row queued
// beside its own inserts (ordering's store/queue.go does the same for those).

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// QueueInsertOutbox queues InsertOutbox on b: it sends exactly what the generated method
// sends, because it calls that method, on pgdb.Queue, a DBTX whose Exec only queues. The
// insert's outcome is b's result for it.
func QueueInsertOutbox(b *pgx.Batch, arg InsertOutboxParams) {
	_ = New(pgdb.Queue{Batch: b}).InsertOutbox(context.Background(), arg)
}
