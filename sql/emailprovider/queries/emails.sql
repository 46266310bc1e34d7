-- name: GetEmailByKey :one
SELECT * FROM emails WHERE idempotency_key = $1;

-- name: InsertEmail :exec
INSERT INTO emails (id, idempotency_key, request_hash, recipient, subject, body, deliveries, response_body, created_at)
VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8);

-- name: ListEmailsByRecipient :many
SELECT * FROM emails WHERE recipient = $1 ORDER BY created_at, id LIMIT 1000;
