-- Queries of the two wrong consumer strategies (INVENTORY_STRATEGY=check-then-process or
-- naive), kept to show what the inbox prevents. The right one uses package inbox alone.

-- name: InboxHasMessage :one
-- check-then-process asks first. Between this answer and the row that records the
-- message, another copy can ask too, or the process can die: the window of the pattern.
SELECT EXISTS (SELECT 1 FROM inbox WHERE message_id = $1 AND consumer = $2);

-- name: NextOutcomeSequence :one
-- The wrong strategies may answer one order more than once, each answer a new event of
-- the order's reservation aggregate, so each needs the next sequence number.
SELECT (coalesce(max(sequence), 0) + 1)::bigint
FROM outbox
WHERE aggregate_type = 'reservation' AND aggregate_id = sqlc.arg(order_id)::text;
