-- name: InsertOutbox :exec
INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope, traceparent, tracestate)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: ClaimOutbox :many
-- Claims a batch for one relay with a lease. SKIP LOCKED lets several relays claim side by
-- side without waiting on each other; the lease (claimed_until) lets another relay take
-- the rows over when this one dies; a relay restarted under the same id takes its own
-- claims back at once instead of waiting out its old lease. Only the oldest unpublished row of an aggregate is
-- claimable, so events of one aggregate are published in sequence order even with many
-- relays: the next one becomes claimable only once this one is marked published.
WITH next AS (
    SELECT o.id
    FROM outbox o
    WHERE o.state = 'pending'
      AND o.available_at <= now()
      AND (o.claimed_until IS NULL OR o.claimed_until < now() OR o.claimed_by = sqlc.arg(relay_id))
      AND NOT EXISTS (
          SELECT 1 FROM outbox e
          WHERE e.aggregate_type = o.aggregate_type
            AND e.aggregate_id = o.aggregate_id
            AND e.sequence < o.sequence
            AND e.state <> 'published')
    ORDER BY o.id
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox
SET claimed_by = sqlc.arg(relay_id),
    claimed_until = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
FROM next
WHERE outbox.id = next.id
RETURNING outbox.id, outbox.event_type, outbox.envelope, outbox.traceparent, outbox.tracestate, outbox.attempts, outbox.created_at;

-- name: MarkPublished :execrows
-- Only after the broker's ack. A relay whose lease ran out may still mark: the broker has
-- the event, which is all "published" means.
UPDATE outbox
SET state = 'published', published_at = now(), claimed_by = NULL, claimed_until = NULL
WHERE id = ANY(sqlc.arg(ids)::uuid[]) AND state = 'pending';

-- name: RecordPublishFailure :one
UPDATE outbox
SET attempts = attempts + 1,
    last_error = sqlc.arg(last_error),
    available_at = now() + make_interval(secs => sqlc.arg(backoff_seconds)::float8),
    claimed_by = NULL,
    claimed_until = NULL,
    state = CASE WHEN attempts + 1 >= sqlc.arg(max_attempts)::int THEN 'dead' ELSE 'pending' END
WHERE id = sqlc.arg(id) AND state = 'pending'
RETURNING state;

-- name: OutboxStats :one
SELECT count(*) FILTER (WHERE state = 'pending')::bigint AS pending,
       count(*) FILTER (WHERE state = 'dead')::bigint AS dead,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')), 0)::float8 AS oldest_pending_seconds
FROM outbox
WHERE state <> 'published';

-- name: DeletePublished :execrows
DELETE FROM outbox
WHERE id IN (
    SELECT id FROM outbox
    WHERE state = 'published' AND published_at < now() - make_interval(secs => sqlc.arg(retention_seconds)::float8)
    LIMIT sqlc.arg(batch_size));

-- name: TryAdvisoryXactLock :one
SELECT pg_try_advisory_xact_lock(sqlc.arg(key)::bigint);
