-- name: ListDeadOutbox :many
-- For the operator's commands (services/ops/outbox.go); the relay never reads dead rows.
-- Dead rows in write order, each with how many later events of its aggregate wait behind
-- it: the relay publishes an aggregate's events in sequence, so nothing after a dead row
-- leaves until the row itself does.
SELECT o.id, o.aggregate_type, o.aggregate_id, o.sequence, o.event_type, o.attempts, o.last_error, o.created_at,
       (SELECT count(*)
        FROM outbox w
        WHERE w.aggregate_type = o.aggregate_type
          AND w.aggregate_id = o.aggregate_id
          AND w.sequence > o.sequence
          AND w.state = 'pending')::bigint AS blocked
FROM outbox o
WHERE o.state = 'dead'
ORDER BY o.id;

-- name: RetryAllDeadOutbox :many
-- Every dead row back to pending with a fresh attempt budget, claimable at once.
-- last_error stays as the record of why it was parked until the next publish overwrites it.
UPDATE outbox
SET state = 'pending', attempts = 0, available_at = now(), claimed_by = NULL, claimed_until = NULL, claim_token = NULL
WHERE state = 'dead'
RETURNING id;

-- name: RetryDeadOutbox :many
-- The given rows back to pending, if they are dead; any other id is left alone.
UPDATE outbox
SET state = 'pending', attempts = 0, available_at = now(), claimed_by = NULL, claimed_until = NULL, claim_token = NULL
WHERE state = 'dead' AND id = ANY(sqlc.arg(ids)::uuid[])
RETURNING id;

-- name: NotifyOutbox :exec
-- Wakes the relays at commit, as an insert does (the outbox trigger fires on insert only).
SELECT pg_notify('outbox', '');
