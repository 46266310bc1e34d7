-- name: ClaimInbox :execrows
-- The first statement of a consumer's transaction. 1: this copy won, do the work.
-- 0: another copy committed first (this insert waited for it): a duplicate.
INSERT INTO inbox (message_id, consumer, content_hash, event_type)
VALUES ($1, $2, $3, $4)
ON CONFLICT (message_id, consumer) DO NOTHING;

-- name: InboxContentHash :one
SELECT content_hash FROM inbox WHERE message_id = $1 AND consumer = $2;

-- name: DeleteProcessedInbox :execrows
DELETE FROM inbox
WHERE (message_id, consumer) IN (
    SELECT message_id, consumer FROM inbox
    WHERE processed_at < now() - make_interval(secs => sqlc.arg(retention_seconds)::float8)
    LIMIT sqlc.arg(batch_size));
