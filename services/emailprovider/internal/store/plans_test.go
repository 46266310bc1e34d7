package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv/plan"
)

// Every query the provider runs on a send and a listing reaches its rows through an
// index by its key, with emails full of history: sent over 72 hours by two accounts to
// 5,000 recipients.
func TestTheEmailProvidersQueriesReadNoTableOrIndexWhole(t *testing.T) {
	pool := historyDatabase(t)
	ctx := t.Context()
	var recipient string
	var afterAt time.Time
	var afterID uuid.UUID
	var accounts, keys []string // a group commit's
	if err := pool.QueryRow(ctx, `SELECT recipient, created_at, id,
		(SELECT array_agg(account) FROM (SELECT account, idempotency_key FROM emails ORDER BY id DESC LIMIT 16) g),
		(SELECT array_agg(idempotency_key) FROM (SELECT account, idempotency_key FROM emails ORDER BY id DESC LIMIT 16) g)
		FROM emails WHERE account = 'notification' ORDER BY id OFFSET 50000 LIMIT 1`).Scan(&recipient, &afterAt, &afterID, &accounts, &keys); err != nil {
		t.Fatal(err)
	}
	const byKey = "emails_account_idempotency_key_key"
	queries := []plan.Query{
		{Name: "GetEmailByKey", SQL: getEmailByKey, Args: []any{accounts[0], keys[0]}, Reads: map[string][]string{"emails": {byKey}}},
		{Name: "GetEmailsByKeys", SQL: getEmailsByKeys, Args: []any{accounts, keys}, Reads: map[string][]string{"emails": {byKey}}},
		{Name: "ListEmailsByRecipient", SQL: listEmailsByRecipient, Args: []any{"notification", recipient, nil, nil, int32(101)},
			Reads: map[string][]string{"emails": {"emails_by_recipient"}}},
		{Name: "ListEmailsByRecipient after a cursor", SQL: listEmailsByRecipient, Args: []any{"notification", recipient, afterAt, afterID, int32(101)},
			Reads: map[string][]string{"emails": {"emails_by_recipient"}}},
	}
	plan.Check(t, pool, queries...)
}

// historyDatabase is a database with the provider's table and plan.Rows emails sent
// over the last 72 hours, analysed as autovacuum would have: one in twenty by a second
// account, to 5,000 recipients, under notification's keys.
func historyDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	migrations := []pgdb.Migrations{
		{FS: schema.EmailProvider, VersionTable: "goose_emailprovider_version"},
	}
	n := fmt.Sprint(plan.Rows)
	return plan.History(t, migrations,
		`INSERT INTO emails (id, account, idempotency_key, request_hash, recipient, subject, body, deliveries, response_body, created_at)
		 SELECT pg_temp.id_at(ts), CASE WHEN g % 20 = 0 THEN 'other' ELSE 'notification' END,
		        'order/' || gen_random_uuid() || '/order-confirmed', '\x00', 'customer-' || g % 5000 || '@example.com',
		        'Your order', 'Thank you.', 1, '{}', ts
		 FROM generate_series(0, `+n+` - 1) g, LATERAL (SELECT now() - interval '72 hours' * (1 - g::float8 / `+n+`) AS ts) t`,
	)
}
