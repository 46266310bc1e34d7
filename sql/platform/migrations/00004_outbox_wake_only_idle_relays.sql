-- +goose Up
-- Wake a relay only when one is waiting. A NOTIFY in a transaction serialises its commit
-- with every other notifying commit (Postgres holds one lock across the commit's WAL
-- flush), so notifying every write halved the commit rate under load
-- (BenchmarkOutboxWriteNotify), while a relay that is busy needs no wake-up: it claims
-- again when its batch is done.
--
-- A relay that is about to wait takes the advisory lock "outbox wake" exclusively, and
-- holds it until it wakes (outbox.Relay's wait). A writer tries to share it, without ever
-- waiting: refused, a relay is waiting (or about to), so it notifies; granted, it holds
-- the lock until it commits, and a relay about to wait first waits for that commit, then
-- claims once more before it sleeps, so it takes this writer's row without a wake-up. Of
-- several relays, one sleeps holding the lock (the "outbox sleeper" lock decides which);
-- the others sleep without it and wake on the same notifications.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('outbox wake', 0)) THEN
        PERFORM pg_notify('outbox', '');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
