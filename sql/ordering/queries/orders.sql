-- name: InsertOrder :one
INSERT INTO orders (id, customer_email)
VALUES ($1, $2)
RETURNING *;

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
