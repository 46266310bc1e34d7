-- name: CreateNotification :exec
-- Phase one, part one: the record exists before anything is sent. A second event for the
-- same order and kind (a redelivery, or a producer duplicate with a new message id) finds
-- the primary key taken and changes nothing.
INSERT INTO notifications (order_id, kind, idempotency_key, recipient, subject, body, event_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (order_id, kind) DO NOTHING;

-- name: ClaimNotification :one
-- Phase one, part two: the right to call the provider for this key, for a lease. Two
-- instances that claim at once serialise on the row lock; the second re-reads the row
-- after the first commits, sees the lease and gets no row. A crashed holder's lease runs
-- out, and then a redelivery or the sweeper takes over. "Not finished" is NOT IN, as in
-- ClaimNotifications: written as notifications_unfinished's own condition, the planner
-- read that index whole whenever ANALYZE had found it empty, and under a held snapshot
-- every claim then stepped over an entry for every record since (docs/chaos.md#soak).
UPDATE notifications
SET status        = 'processing',
    attempts      = attempts + 1,
    claim_token   = sqlc.arg(claim_token),
    claimed_until = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
    updated_at    = now()
WHERE order_id = sqlc.arg(order_id) AND kind = sqlc.arg(kind)
  AND status NOT IN ('completed', 'failed')
  AND (claimed_until IS NULL OR claimed_until <= now())
RETURNING *;

-- name: GetNotification :one
SELECT * FROM notifications WHERE order_id = $1 AND kind = $2;

-- name: CompleteNotification :execrows
-- Phase two: the provider has the email. Not fenced by the claim: whoever learns that the
-- provider accepted it may record the fact, even a holder whose lease ran out.
UPDATE notifications
SET status            = 'completed',
    provider_email_id = sqlc.arg(provider_email_id),
    claim_token       = NULL,
    claimed_until     = NULL,
    last_error        = NULL,
    completed_at      = now(),
    updated_at        = now()
WHERE order_id = sqlc.arg(order_id) AND kind = sqlc.arg(kind) AND status <> 'completed';

-- name: ReleaseNotification :one
-- An attempt ended without knowing the email was sent (timeout, provider down, 409). The
-- record waits for reconciliation, or fails for good once it has used its attempts (or at
-- once, when give_up is set: the provider refused the request itself). Fenced by the claim:
-- a holder whose lease ran out and was taken over must not overwrite the new holder's state.
-- The token is the whole fence: only a claim sets it, to 'processing', and every other
-- change clears it. (A status = 'processing' beside it implies notifications_unfinished's
-- condition, and the planner may read that index whole: see ClaimNotification.)
UPDATE notifications
SET status        = CASE WHEN sqlc.arg(give_up)::bool OR attempts >= sqlc.arg(max_attempts)::int
                         THEN 'failed' ELSE 'needs-reconciliation' END,
    last_error    = sqlc.arg(last_error),
    claim_token   = NULL,
    claimed_until = NULL,
    updated_at    = now()
WHERE order_id = sqlc.arg(order_id) AND kind = sqlc.arg(kind)
  AND claim_token = sqlc.arg(claim_token)
RETURNING status, attempts;

-- name: ListStaleNotifications :many
-- For the sweeper: records left unfinished and untouched for longer than stale_seconds,
-- whose lease (if any) has run out.
SELECT order_id, kind FROM notifications
WHERE status IN ('processing', 'needs-reconciliation')
  AND updated_at < now() - make_interval(secs => sqlc.arg(stale_seconds)::float8)
  AND (claimed_until IS NULL OR claimed_until <= now())
ORDER BY updated_at
LIMIT sqlc.arg(batch_size);

-- name: ListNotificationsByOrder :many
-- One page of an order's records in kind order: those after the cursor's kind, or from
-- the first without one, at most max_rows of them.
SELECT * FROM notifications
WHERE order_id = sqlc.arg(order_id)
  AND (sqlc.narg(after_kind)::text IS NULL OR kind > sqlc.narg(after_kind)::text)
ORDER BY kind
LIMIT sqlc.arg(max_rows);

-- name: CreateNotifications :execrows
-- CreateNotification for the emails of a batch. Fewer rows than emails: some record
-- existed, which the batch leaves to the one-at-a-time path.
INSERT INTO notifications (order_id, kind, idempotency_key, recipient, subject, body, event_id)
SELECT unnest(sqlc.arg(order_ids)::uuid[]), unnest(sqlc.arg(kinds)::text[]), unnest(sqlc.arg(idempotency_keys)::text[]),
       unnest(sqlc.arg(recipients)::text[]), unnest(sqlc.arg(subjects)::text[]), unnest(sqlc.arg(bodies)::text[]),
       unnest(sqlc.arg(event_ids)::uuid[])
ON CONFLICT (order_id, kind) DO NOTHING;

-- name: ClaimNotifications :many
-- ClaimNotification for the records of a batch, under one claim token. "Not finished"
-- is written as NOT IN, not as notifications_unfinished's own condition: a condition that
-- implies a partial index's lets the planner read that index whole instead of looking up
-- the batch's keys, and a held snapshot keeps an entry there for every record since.
UPDATE notifications
SET status        = 'processing',
    attempts      = attempts + 1,
    claim_token   = sqlc.arg(claim_token),
    claimed_until = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
    updated_at    = now()
WHERE (order_id, kind) IN (SELECT unnest(sqlc.arg(order_ids)::uuid[]), unnest(sqlc.arg(kinds)::text[]))
  AND status NOT IN ('completed', 'failed')
  AND (claimed_until IS NULL OR claimed_until <= now())
RETURNING *;

-- name: CompleteNotifications :execrows
-- CompleteNotification for the emails of a batch the provider has: phase two of every one
-- of them in one statement, each with its own provider email id.
UPDATE notifications n
SET status            = 'completed',
    provider_email_id = c.provider_email_id,
    claim_token       = NULL,
    claimed_until     = NULL,
    last_error        = NULL,
    completed_at      = now(),
    updated_at        = now()
FROM (SELECT unnest(sqlc.arg(order_ids)::uuid[])          AS order_id,
             unnest(sqlc.arg(kinds)::text[])              AS kind,
             unnest(sqlc.arg(provider_email_ids)::text[]) AS provider_email_id) c
WHERE n.order_id = c.order_id AND n.kind = c.kind AND n.status <> 'completed';
