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

-- name: ClaimInboxBatch :execrows
-- ClaimInbox for several messages in one statement. Fewer rows than messages: some
-- message of the batch is a copy of one processed before (or of another in the batch).
INSERT INTO inbox (message_id, consumer, content_hash, event_type)
SELECT unnest(sqlc.arg(message_ids)::uuid[]), sqlc.arg(consumer), unnest(sqlc.arg(content_hashes)::bytea[]), unnest(sqlc.arg(event_types)::text[])
ON CONFLICT (message_id, consumer) DO NOTHING;
