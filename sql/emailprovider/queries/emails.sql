-- name: TryLockIdempotencyKey :one
-- Held until the transaction ends. Taken before looking the key up, so "in flight" is
-- decided by the lock and "already sent" by a row that is only visible once committed.
-- Postgres makes a commit visible before it releases the transaction's locks, so the
-- next holder of the lock always sees the row of the one before.
SELECT pg_try_advisory_xact_lock(hashtextextended('emailprovider/idempotency-key:' || sqlc.arg(key)::text, 0));

-- name: GetEmailByKey :one
SELECT * FROM emails WHERE idempotency_key = $1;

-- name: InsertEmail :exec
INSERT INTO emails (id, idempotency_key, request_hash, recipient, subject, body, deliveries, response_body, created_at)
VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8);

-- name: ListEmailsByRecipient :many
SELECT * FROM emails WHERE recipient = $1 ORDER BY created_at, id LIMIT 1000;
