-- name: RecordCancellation :one
-- The order's cancellation, applied once, by its sequence: a first event of the order
-- writes the row (the tombstone a later placement finds); an answered order takes the
-- cancellation only if its sequence is above the last applied one. No row: a stale or
-- repeated cancellation, which changes nothing. Of an order's placement and cancellation
-- at once, the second to reach this row waits for the first (the primary key, or its
-- row lock) and then decides on what the first committed.
INSERT INTO order_answers (order_id, outcome, last_sequence, cancelled_at)
VALUES (sqlc.arg(order_id), 'cancelled', sqlc.arg(sequence), now())
ON CONFLICT (order_id) DO UPDATE
SET last_sequence = EXCLUDED.last_sequence, cancelled_at = EXCLUDED.cancelled_at
WHERE order_answers.last_sequence < EXCLUDED.last_sequence
RETURNING outcome, (xmax = 0)::bool AS first_event;

-- name: DeleteReservations :many
-- Releases the order's reservations: the rows go, and the caller takes their quantities
-- off the books' reserved counts (AddReserved, negated).
DELETE FROM reservations WHERE order_id = $1
RETURNING book_id, quantity;
