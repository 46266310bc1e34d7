-- name: GetEmailByKey :one
SELECT * FROM emails WHERE idempotency_key = $1;

-- name: InsertEmail :exec
INSERT INTO emails (id, idempotency_key, request_hash, recipient, subject, body, deliveries, response_body, created_at)
VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8);

-- name: ListEmailsByRecipient :many
-- One page of the emails sent to an address, oldest first: those after the cursor
-- (created_at, id), or from the first without one, at most max_rows of them.
SELECT * FROM emails
WHERE recipient = sqlc.arg(recipient)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) > (sqlc.narg(after_created_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY created_at, id
LIMIT sqlc.arg(max_rows);
