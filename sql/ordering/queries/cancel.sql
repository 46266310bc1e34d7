-- name: CancelOrder :one
-- Moves a pending or confirmed order to cancelled, once: of two cancels at once the second
-- waits on the row lock, then finds the order cancelled and changes nothing (no row).
UPDATE orders
SET status = 'cancelled', version = version + 1, updated_at = sqlc.arg(at)
WHERE id = sqlc.arg(id) AND status IN ('pending', 'confirmed')
RETURNING *;

-- name: InsertOrderHistory :exec
INSERT INTO order_history (order_id, event, at) VALUES ($1, $2, $3)
ON CONFLICT (order_id, event) DO NOTHING;

-- name: InsertOrderHistories :exec
-- InsertOrderHistory for the outcomes of a batch.
INSERT INTO order_history (order_id, event, at)
SELECT unnest(sqlc.arg(ids)::uuid[]), unnest(sqlc.arg(events)::text[]), now()
ON CONFLICT (order_id, event) DO NOTHING;

-- name: ListOrderHistory :many
SELECT event, at FROM order_history WHERE order_id = $1 ORDER BY at, event;

-- name: GetCancelIdempotencyKey :one
SELECT * FROM cancel_idempotency_keys WHERE key = $1;

-- name: InsertCancelIdempotencyKey :exec
INSERT INTO cancel_idempotency_keys (key, request_hash, order_id, response_status, response_body)
VALUES ($1, $2, $3, $4, $5);

-- name: DeleteExpiredCancelIdempotencyKeys :execrows
-- DeleteExpiredIdempotencyKeys for the keys of POST /orders/{id}/cancel.
DELETE FROM cancel_idempotency_keys
WHERE key IN (
    SELECT key FROM cancel_idempotency_keys
    WHERE created_at < now() - make_interval(secs => sqlc.arg(retention_seconds)::float8)
    LIMIT sqlc.arg(batch_size));
