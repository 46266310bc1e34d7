-- +goose Up
-- The transactional outbox. A service writes its business change and the event that
-- announces it into this table in one transaction, so a crash leaves both or neither.
-- The relay publishes rows later; a crash between publish and mark publishes a row twice,
-- never zero times, and consumers deduplicate on id.
CREATE TABLE outbox (
    id             uuid PRIMARY KEY,                 -- the event id (UUIDv7), made once, here
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    sequence       bigint      NOT NULL CHECK (sequence > 0),
    event_type     text        NOT NULL,             -- the routing key
    schema_version int         NOT NULL,
    envelope       json        NOT NULL,             -- json, not jsonb: the exact bytes are republished
    traceparent    text        NOT NULL DEFAULT '',
    tracestate     text        NOT NULL DEFAULT '',
    state          text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'published', 'dead')),
    attempts       int         NOT NULL DEFAULT 0,
    last_error     text,
    claimed_by     text,
    claimed_until  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    available_at   timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz,
    UNIQUE (aggregate_type, aggregate_id, sequence)
);

CREATE INDEX outbox_ready ON outbox (id) WHERE state = 'pending';
CREATE INDEX outbox_unpublished_by_aggregate ON outbox (aggregate_type, aggregate_id, sequence) WHERE state <> 'published';
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE state = 'published';

-- Wake the relay when a writing transaction commits (NOTIFY is delivered at commit, never
-- for a rolled-back transaction). Polling stays as the fallback for a missed notification.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- +goose Down
DROP TABLE outbox;
DROP FUNCTION outbox_notify();
