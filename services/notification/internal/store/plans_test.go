package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv/plan"
)

// Every query notification runs on an event, a send and a sweep reaches its rows through
// an index by its key, with notifications full of history: records completed over 72
// hours, a few failed, and the last ones still waiting, unclaimed, claimed or to be
// reconciled: 1,000 of them behind a backlog, or none, as autovacuum's ANALYZE finds on
// a quiet day. The quiet day is the hard case: the statistics then say
// notifications_unfinished holds nothing, and a claim whose condition implies the index's reads it whole, which under a
// held snapshot means every record since the snapshot (the two-hour soak's notification
// fell to a third of its rate so).
func TestNotificationsQueriesReadNoTableOrIndexWhole(t *testing.T) {
	for _, waiting := range []int{1000, 0} {
		t.Run(fmt.Sprint(waiting, " waiting"), func(t *testing.T) {
			checkPlans(t, historyDatabase(t, waiting))
		})
	}
}

func checkPlans(t *testing.T, pool *pgxpool.Pool) {
	ctx := t.Context()
	var done uuid.UUID
	var ids []uuid.UUID // the records of a batch: the newest
	var kinds []string
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT order_id FROM notifications WHERE kind = 'order-cancelled' ORDER BY order_id OFFSET 5000 LIMIT 1),
		array_agg(order_id), array_agg(kind)
		FROM (SELECT order_id, kind FROM notifications ORDER BY order_id DESC LIMIT 16) p`).Scan(&done, &ids, &kinds); err != nil {
		t.Fatal(err)
	}
	emailIDs := slices.Repeat([]string{"email-1"}, len(ids))
	token := uuid.New()
	const (
		pkey       = "notifications_pkey"
		unfinished = "notifications_unfinished"
		lease      = 6.0 // 2×PROVIDER_TIMEOUT + 2 s
	)
	byKey := map[string][]string{"notifications": {pkey}}
	queries := []plan.Query{
		{Name: "ClaimNotification", SQL: claimNotification, Args: []any{token, lease, ids[0], kinds[0]}, Reads: byKey},
		{Name: "ClaimNotifications", SQL: claimNotifications, Args: []any{token, lease, ids, kinds}, Reads: byKey},
		{Name: "GetNotification", SQL: getNotification, Args: []any{done, "order-confirmed"}, Reads: byKey},
		{Name: "CompleteNotification", SQL: completeNotification, Args: []any{"email-1", ids[0], kinds[0]}, Reads: byKey},
		{Name: "CompleteNotifications", SQL: completeNotifications, Args: []any{ids, kinds, emailIDs}, Reads: byKey},
		{Name: "ReleaseNotification", SQL: releaseNotification, Args: []any{false, int32(30), "timeout", ids[0], kinds[0], token}, Reads: byKey},
		{Name: "ListStaleNotifications", SQL: listStaleNotifications, Args: []any{(30 * time.Second).Seconds(), int32(100)},
			Reads: map[string][]string{"notifications": {unfinished}}},
		{Name: "ListNotificationsByOrder", SQL: listNotificationsByOrder, Args: []any{done, nil, int32(101)}, Reads: byKey},
		{Name: "ListNotificationsByOrder after a kind", SQL: listNotificationsByOrder, Args: []any{done, "order-cancelled", int32(101)}, Reads: byKey},
	}
	plan.Check(t, pool, queries...)
}

// historyDatabase is a database with notification's tables and the emails of
// plan.Rows orders over the last 72 hours, analysed as autovacuum would have: each
// order confirmed or rejected, a tenth of them cancelled too, one in a hundred failed,
// the last waiting orders' records unfinished.
func historyDatabase(t *testing.T, waiting int) *pgxpool.Pool {
	t.Helper()
	w := fmt.Sprint(waiting)
	migrations := []pgdb.Migrations{
		{FS: schema.Platform, VersionTable: "goose_platform_version"},
		{FS: schema.Notification, VersionTable: "goose_notification_version"},
	}
	n := fmt.Sprint(plan.Rows)
	return plan.History(t, migrations,
		`INSERT INTO notifications (order_id, kind, status, idempotency_key, recipient, subject, body, event_id, attempts,
		                            claim_token, claimed_until, provider_email_id, created_at, updated_at, completed_at)
		 SELECT o.id, k, s.status, 'order/' || o.id || '/' || k, 'customer-' || g % 5000 || '@example.com', 'Your order', 'Thank you.',
		        gen_random_uuid(), 1, s.token, s.until, CASE WHEN s.status = 'completed' THEN 'email-' || g END, ts, ts,
		        CASE WHEN s.status = 'completed' THEN ts END
		 FROM generate_series(0, `+n+` - 1) g,
		      LATERAL (SELECT now() - interval '72 hours' * (1 - g::float8 / `+n+`) AS ts) t,
		      LATERAL (SELECT pg_temp.id_at(ts) AS id) o,
		      unnest(CASE WHEN g % 10 = 0 THEN '{order-rejected}'::text[] WHEN g % 10 = 1 THEN '{order-confirmed,order-cancelled}' ELSE '{order-confirmed}' END) k,
		      LATERAL (SELECT CASE WHEN g < `+n+` - `+w+` THEN CASE WHEN g % 100 = 99 THEN 'failed' ELSE 'completed' END
		                           WHEN g % 3 = 2 THEN 'needs-reconciliation' ELSE 'processing' END AS status,
		                      CASE WHEN g >= `+n+` - `+w+` AND g % 3 = 1 THEN gen_random_uuid() END AS token,
		                      CASE WHEN g >= `+n+` - `+w+` AND g % 3 = 1 THEN now() + interval '6 seconds' END AS until) s`,
	)
}
