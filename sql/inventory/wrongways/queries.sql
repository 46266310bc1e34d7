-- Queries of the wrong consumers (package wrongways) and of no other: what the inbox and
-- order_answers prevent, written as the wrong designs write it. sqlc generates them into
-- the wrong ways' own package, so inventory's store holds only what stock runs.

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

-- name: ClaimInboxUnderKey :execrows
-- The correlation-id consumer claims its inbox row under a key of its own choosing (the
-- order id) and keeps no content hash, as the usual "seen this key?" table does: 0 rows
-- means the key was taken, whatever the message said.
INSERT INTO inbox (message_id, consumer, content_hash, event_type)
VALUES (sqlc.arg(key), sqlc.arg(consumer), ''::bytea, sqlc.arg(event_type))
ON CONFLICT (message_id, consumer) DO NOTHING;

-- name: ForgetOrderAnswer :exec
-- Only INVENTORY_CANCELLATIONS=ignore-sequence, the wrong way: a cancellation that
-- overtook its placement takes its tombstone back.
DELETE FROM order_answers WHERE order_id = $1;
