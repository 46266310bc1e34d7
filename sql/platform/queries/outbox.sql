-- name: InsertOutbox :exec
INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope, traceparent, tracestate)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: InsertOutboxBatch :exec
-- InsertOutbox for several events in one statement (and one NOTIFY: the trigger fires
-- once per statement).
INSERT INTO outbox (id, aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope, traceparent, tracestate)
SELECT unnest(sqlc.arg(ids)::uuid[]), unnest(sqlc.arg(aggregate_types)::text[]), unnest(sqlc.arg(aggregate_ids)::text[]),
       unnest(sqlc.arg(sequences)::bigint[]), unnest(sqlc.arg(event_types)::text[]), unnest(sqlc.arg(schema_versions)::int[]),
       unnest(sqlc.arg(envelopes)::text[])::json, unnest(sqlc.arg(traceparents)::text[]), unnest(sqlc.arg(tracestates)::text[]);

-- name: ClaimOutbox :many
-- Claims a batch for one relay process with a lease, from the rows at or after
-- sqlc.arg(from_id) (the relay's frontier: see Relay.claimFrom). SKIP LOCKED lets several relays claim
-- side by side without waiting on each other; the lease (claimed_until) lets another relay
-- take the rows over when this one dies. A row this process claimed before is taken back
-- at once (its last batch was cut short), and so is a row of an earlier process under the
-- same relay id, but only when reclaim_own says this process is now the only one under
-- that id: the claims of a live twin are left to their lease. Only the oldest unpublished
-- row of an aggregate is claimable, so events of one aggregate are published in sequence
-- order even with many relays: the next one becomes claimable only once this one is
-- marked published.
WITH next AS (
    SELECT o.id
    FROM outbox o
    WHERE o.state = 'pending'
      AND o.id >= sqlc.arg(from_id)::uuid
      AND o.available_at <= now()
      AND (o.claimed_until IS NULL
           OR o.claimed_until < now()
           OR o.claim_token = sqlc.arg(claim_token)::uuid
           OR (sqlc.arg(reclaim_own)::bool AND o.claimed_by = sqlc.arg(relay_id)))
      -- Checked for each candidate on its aggregate's own entries of the unique index:
      -- OFFSET 0 keeps the planner from making it an anti-join, which may read an index
      -- whole for each candidate (see migration 00005).
      AND NOT EXISTS (
          SELECT 1 FROM outbox e
          WHERE e.aggregate_type = o.aggregate_type
            AND e.aggregate_id = o.aggregate_id
            AND e.sequence < o.sequence
            AND e.state <> 'published'
          OFFSET 0)
    ORDER BY o.id
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox
SET claimed_by = sqlc.arg(relay_id),
    claim_token = sqlc.arg(claim_token)::uuid,
    claimed_until = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
FROM next
WHERE outbox.id = next.id
RETURNING outbox.id, outbox.event_type, outbox.envelope, outbox.traceparent, outbox.tracestate, outbox.attempts, outbox.created_at;

-- name: OldestPending :one
-- The oldest pending row at or after sqlc.arg(from_id): the relay's frontier. It walks
-- the pending rows' index from from_id and stops at the first row still pending, so it
-- steps only over the entries between the last frontier and this one; no rows: none
-- pending.
SELECT id FROM outbox
WHERE state = 'pending' AND id >= sqlc.arg(from_id)::uuid
ORDER BY id
LIMIT 1;

-- name: OldestSnapshotAge :one
-- How many transactions old the oldest snapshot held in this database is (0: none
-- but this statement's own): a snapshot keeps every row version it might see, and the
-- index entries that point at them, from being cleaned up. backend_xmin is shown for
-- every role's sessions, so no privilege beyond the service's own is needed.
SELECT coalesce(max(age(a.backend_xmin)), 0)::bigint AS age
FROM pg_stat_get_activity(NULL) a
WHERE a.datid = (SELECT s.datid FROM pg_stat_get_activity(pg_backend_pid()) s)
  AND a.pid <> pg_backend_pid();

-- name: MarkPublished :execrows
-- Only after the broker's ack, whoever holds the claim now: the broker has the event,
-- which is all "published" means. That includes a row parked as dead while its confirm
-- was late: leaving it dead would report as lost an event consumers already have.
UPDATE outbox
SET state = 'published', published_at = now(), claimed_by = NULL, claimed_until = NULL, claim_token = NULL
WHERE id = ANY(sqlc.arg(ids)::uuid[]) AND state IN ('pending', 'dead');

-- name: RecordPublishFailure :one
-- A failure that belongs to the message (a nack or return on a healthy channel) spends
-- one of its attempts. Only the claim's own process records it: a row another relay has
-- taken over is that relay's to judge.
UPDATE outbox
SET attempts = attempts + 1,
    last_error = sqlc.arg(last_error),
    available_at = now() + make_interval(secs => sqlc.arg(backoff_seconds)::float8),
    claimed_by = NULL,
    claimed_until = NULL,
    claim_token = NULL,
    state = CASE WHEN attempts + 1 >= sqlc.arg(max_attempts)::int THEN 'dead' ELSE 'pending' END
WHERE id = sqlc.arg(id) AND state = 'pending' AND claim_token = sqlc.arg(claim_token)::uuid
RETURNING state;

-- name: ReleaseClaims :execrows
-- A failure of the broker or the link belongs to no message: the rows go back as they
-- were, attempts untouched, for the next batch after the relay's own backoff.
UPDATE outbox
SET claimed_by = NULL, claimed_until = NULL, claim_token = NULL
WHERE id = ANY(sqlc.arg(ids)::uuid[]) AND state = 'pending' AND claim_token = sqlc.arg(claim_token)::uuid;

-- name: DeferClaims :execrows
-- A refusal of the event's destination (a queue that nacks or does not exist) belongs to
-- neither the message nor the relay: the rows go back with attempts untouched, and are
-- claimable again only after their own backoff, so that other rows go on without them.
UPDATE outbox
SET claimed_by = NULL, claimed_until = NULL, claim_token = NULL,
    available_at = now() + make_interval(secs => sqlc.arg(delay_seconds)::float8)
WHERE id = ANY(sqlc.arg(ids)::uuid[]) AND state = 'pending' AND claim_token = sqlc.arg(claim_token)::uuid;

-- name: TryRelayLock :one
-- Held by the one process that runs under a relay id, on its LISTEN connection.
SELECT pg_try_advisory_lock(hashtextextended('outbox relay ' || sqlc.arg(relay_id)::text, 0));

-- name: EndOrphanedSessions :one
-- Ends the other sessions named application_name, waiting up to 5 s for each to go, and
-- says how many ended. A relay process names its lock sessions uniquely and opens a new
-- one only after giving up the last, so another session of that name is one the process
-- gave up while the server kept it (its client side broke) and the locks with it. A role
-- may end its own sessions: no privilege beyond the service's own is needed.
SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid, 5000))::bigint AS ended
FROM pg_stat_get_activity(NULL) a
WHERE a.application_name = sqlc.arg(application_name)::text AND a.pid <> pg_backend_pid();

-- name: TakeSleeperLock :one
-- Taken by a relay about to wait for a wake-up, before the wake lock: only one relay of a
-- database holds the wake lock while it sleeps. Another finds this taken and sleeps
-- without it: while the holder sleeps every writer notifies, and every relay listening
-- hears it; while the holder works, the rows are the holder's to take. A relay refused
-- after a batch with rows claims once more before it sleeps: its marks may have made an
-- aggregate's next row claimable after the holder's last claim.
SELECT pg_try_advisory_lock(hashtextextended('outbox sleeper', 0));

-- name: HoldWakeLock :exec
-- Taken by the relay that holds the sleeper lock, on the same connection, kept until it
-- wakes: from then on every writer notifies (the trigger of
-- 00004_outbox_wake_only_idle_relays). It waits for the writers that hold the lock shared,
-- and so did not notify, to commit.
SELECT pg_advisory_lock(hashtextextended('outbox wake', 0));

-- name: ReleaseWakeLock :exec
-- Released by a relay that woke up: writers stop notifying while it works.
SELECT pg_advisory_unlock(hashtextextended('outbox wake', 0)), pg_advisory_unlock(hashtextextended('outbox sleeper', 0));

-- name: OutboxStats :one
-- Each count from its own partial index (outbox_ready, outbox_dead).
SELECT (SELECT count(*) FROM outbox WHERE state = 'pending')::bigint AS pending,
       (SELECT count(*) FROM outbox WHERE state = 'dead')::bigint AS dead,
       coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM outbox WHERE state = 'pending'), 0)::float8 AS oldest_pending_seconds;

-- name: DeletePublished :execrows
DELETE FROM outbox
WHERE id IN (
    SELECT id FROM outbox
    WHERE state = 'published' AND published_at < now() - make_interval(secs => sqlc.arg(retention_seconds)::float8)
    LIMIT sqlc.arg(batch_size));

-- name: ListOutboxForAggregate :many
-- The events of one aggregate in sequence order, with where each stands (GET
-- /orders/{id}/events in ordering, the reservation's events in inventory). The unique
-- (aggregate_type, aggregate_id, sequence) index answers it.
SELECT id, event_type, sequence, state, attempts, traceparent, created_at, published_at
FROM outbox
WHERE aggregate_type = $1 AND aggregate_id = $2
ORDER BY sequence;

-- name: OldestWriterStart :one
-- When the oldest transaction in this database that has written something (it holds a
-- transaction id) began, other than this session's; now when none is open. Rows it
-- commits carry ids made after that, however long it lasts: the relay's claim starts no
-- later, so that a row committed long after its id was made waits for no sweep. A
-- session that only reads (a report's long snapshot) holds no transaction id. Sessions of
-- other roles show no transaction here, and the service's writers share its role.
SELECT coalesce(min(a.xact_start), now())::timestamptz AS started
FROM pg_stat_get_activity(NULL) a
WHERE a.datid = (SELECT s.datid FROM pg_stat_get_activity(pg_backend_pid()) s)
  AND a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid();
