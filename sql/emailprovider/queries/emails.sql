-- name: GetEmailByKey :one
SELECT * FROM emails WHERE account = $1 AND idempotency_key = $2;

-- name: InsertEmail :exec
INSERT INTO emails (id, account, idempotency_key, request_hash, recipient, subject, body, deliveries, response_body, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9);

-- name: ListEmailsByRecipient :many
-- One page of the emails an account sent to an address, oldest first: those after the
-- cursor (created_at, id), or from the first without one, at most max_rows of them.
SELECT * FROM emails
WHERE account = sqlc.arg(account)
  AND recipient = sqlc.arg(recipient)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) > (sqlc.narg(after_created_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY created_at, id
LIMIT sqlc.arg(max_rows);

-- name: GetEmailsByKeys :many
-- The emails sent under any of the (account, idempotency_key) pairs, the i-th element of
-- each array one pair: the lookup of a group commit.
SELECT * FROM emails
WHERE (account, idempotency_key) IN (
    SELECT unnest(sqlc.arg(accounts)::text[]), unnest(sqlc.arg(idempotency_keys)::text[]));

-- name: InsertEmails :exec
-- InsertEmail for a group commit: the i-th element of each array is one email.
INSERT INTO emails (id, account, idempotency_key, request_hash, recipient, subject, body, deliveries, response_body, created_at)
SELECT unnest(sqlc.arg(ids)::uuid[]), unnest(sqlc.arg(accounts)::text[]), unnest(sqlc.arg(idempotency_keys)::text[]),
       unnest(sqlc.arg(request_hashes)::bytea[]), unnest(sqlc.arg(recipients)::text[]), unnest(sqlc.arg(subjects)::text[]),
       unnest(sqlc.arg(bodies)::text[]), 1, unnest(sqlc.arg(response_bodies)::bytea[]), unnest(sqlc.arg(created_ats)::timestamptz[]);
