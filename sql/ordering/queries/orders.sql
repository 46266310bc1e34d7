-- name: InsertOrder :exec
-- Every value comes from Go, created_at and version included, so nothing has to come
-- back: the insert can go in one batch with the order's lines and its idempotency key.
INSERT INTO orders (id, customer_email, status, version, created_at, updated_at)
VALUES (sqlc.arg(id), sqlc.arg(customer_email), sqlc.arg(status), sqlc.arg(version), sqlc.arg(created_at), sqlc.arg(created_at));

-- name: InsertOrderLines :exec
INSERT INTO order_lines (order_id, book_id, quantity)
SELECT sqlc.arg(order_id), unnest(sqlc.arg(book_ids)::uuid[]), unnest(sqlc.arg(quantities)::int[]);

-- name: GetOrder :one
SELECT * FROM orders WHERE id = $1;

-- name: ListOrderLines :many
SELECT book_id, quantity FROM order_lines WHERE order_id = $1 ORDER BY book_id;

-- name: GetIdempotencyKey :one
SELECT * FROM idempotency_keys WHERE key = $1;

-- name: InsertIdempotencyKey :exec
INSERT INTO idempotency_keys (key, request_hash, order_id, response_status, response_body)
VALUES ($1, $2, $3, $4, $5);

-- name: ApplyStockOutcome :one
-- Moves a pending order to its outcome once. An outcome for an order that already has one
-- changes nothing (0 rows), which the inbox already guarantees per message; this guards
-- against the same outcome arriving under two message ids.
UPDATE orders
SET status = sqlc.arg(status), version = version + 1, updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'pending'
RETURNING *;

-- name: DeleteExpiredIdempotencyKeys :execrows
-- Forgets the keys of POST /orders older than the retention, at most batch_size at a
-- time (orders.ForgetIdempotencyKeys says why that is safe). The orders stay.
DELETE FROM idempotency_keys
WHERE key IN (
    SELECT key FROM idempotency_keys
    WHERE created_at < now() - make_interval(secs => sqlc.arg(retention_seconds)::float8)
    LIMIT sqlc.arg(batch_size));
