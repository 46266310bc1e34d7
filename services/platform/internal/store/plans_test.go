package store

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv/plan"
)

// Every query the relay and the inbox run on each message reaches its rows through an
// index by its key, with the outbox and the inbox full of history: published rows over
// 72 hours, processed messages, and 1,100 pending and dead rows behind an outage, or
// none, as autovacuum's ANALYZE finds on a quiet day. On the quiet day the statistics
// say the partial indexes hold nothing, and a query whose condition implies one's would
// read it whole: under a held snapshot, every entry it had since.
func TestTheOutboxAndInboxQueriesReadNoTableOrIndexWhole(t *testing.T) {
	for _, waiting := range []int{1100, 0} {
		t.Run(fmt.Sprint(waiting, " waiting"), func(t *testing.T) {
			checkPlans(t, historyDatabase(t, waiting))
		})
	}
}

func checkPlans(t *testing.T, pool *pgxpool.Pool) {
	ctx := t.Context()
	token, relay := uuid.Must(uuid.NewV7()), "plans"
	frontier := uuid.Must(uuid.NewV7()) // an id made now: the claim's frontier when nothing waits
	var ids []uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM outbox ORDER BY id DESC LIMIT 100) p`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	const (
		pkey      = "outbox_pkey"
		ready     = "outbox_ready"
		byAgg     = "outbox_aggregate_type_aggregate_id_sequence_key"
		published = "outbox_published_at"
	)
	queries := []plan.Query{
		{Name: "ClaimOutbox", SQL: claimOutbox, Args: []any{relay, token, 30.0, frontier, true, int32(256)},
			Reads: map[string][]string{"outbox": {ready, byAgg, pkey}}},
		{Name: "OldestPending", SQL: oldestPending, Args: []any{uuid.UUID{}}, Reads: map[string][]string{"outbox": {ready}}},
		{Name: "MarkPublished", SQL: markPublished, Args: []any{ids}, Reads: map[string][]string{"outbox": {pkey}}},
		// A claim's rows are pending: found by id in either index.
		{Name: "RecordPublishFailure", SQL: recordPublishFailure, Args: []any{"nack", 1.0, int32(5), ids[0], token},
			Reads: map[string][]string{"outbox": {pkey, ready}}},
		{Name: "ReleaseClaims", SQL: releaseClaims, Args: []any{ids, token}, Reads: map[string][]string{"outbox": {pkey, ready}}},
		{Name: "DeferClaims", SQL: deferClaims, Args: []any{5.0, ids, token}, Reads: map[string][]string{"outbox": {pkey, ready}}},
		{Name: "ListOutboxForAggregate", SQL: listOutboxForAggregate, Args: []any{"order", "history-42"},
			Reads: map[string][]string{"outbox": {byAgg}}},
		{Name: "DeletePublished", SQL: deletePublished, Args: []any{float64(72 * 3600), int32(1000)},
			Reads: map[string][]string{"outbox": {published, pkey}}},
		// The counts read the pending and dead rows' partial indexes whole: the rows
		// waiting, not the history.
		{Name: "OutboxStats", SQL: outboxStats, Reads: map[string][]string{"outbox": {ready, "outbox_dead"}},
			Partial: []string{ready, "outbox_dead"}},
		{Name: "InboxContentHash", SQL: inboxContentHash, Args: []any{uuid.Must(uuid.NewV7()), "plans"},
			Reads: map[string][]string{"inbox": {"inbox_pkey"}}},
		{Name: "DeleteProcessedInbox", SQL: deleteProcessedInbox, Args: []any{float64(72 * 3600), int32(1000)},
			Reads: map[string][]string{"inbox": {"inbox_processed_at", "inbox_pkey"}}},
	}
	plan.Check(t, pool, queries...)
}

// historyDatabase is a database with the platform's tables and plan.Rows rows of
// history in each, analysed as autovacuum would have: outbox rows published over the
// last 72 hours in aggregates of three events, then the waiting rows (the first 100 of
// them dead, the rest pending), and as many processed inbox messages.
func historyDatabase(t *testing.T, waiting int) *pgxpool.Pool {
	t.Helper()
	migrations := []pgdb.Migrations{
		{FS: schema.Platform, VersionTable: "goose_platform_version"},
	}
	return plan.History(t, migrations,
		`INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope, state, created_at, published_at)
		 SELECT pg_temp.id_at(ts), 'order', 'history-' || g / 3, g % 3 + 1, 'example.happened.v1', 1, '{"data":{}}', 'published', ts, ts
		 FROM generate_series(0, `+fmt.Sprint(plan.Rows-1)+`) g, LATERAL (SELECT now() - interval '72 hours' * (1 - g::float8 / `+fmt.Sprint(plan.Rows)+`) AS ts) t`,
		`INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope, state, attempts, created_at)
		 SELECT pg_temp.id_at(now() - interval '1 minute' + g * interval '10 ms'), 'order', 'waiting-' || g, 1, 'example.happened.v1', 1, '{"data":{}}',
		        CASE WHEN g < 100 THEN 'dead' ELSE 'pending' END, CASE WHEN g < 100 THEN 5 ELSE 0 END, now()
		 FROM generate_series(0, `+fmt.Sprint(waiting-1)+`) g`,
		`INSERT INTO inbox (message_id, consumer, content_hash, event_type, processed_at)
		 SELECT pg_temp.id_at(ts), 'plans', '\x00', 'example.happened.v1', ts
		 FROM generate_series(0, `+fmt.Sprint(plan.Rows-1)+`) g, LATERAL (SELECT now() - interval '72 hours' * (1 - g::float8 / `+fmt.Sprint(plan.Rows)+`) AS ts) t`,
	)
}
