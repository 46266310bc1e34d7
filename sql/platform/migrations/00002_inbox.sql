-- +goose Up
-- The transactional inbox. A consumer inserts (message id, consumer) as the first
-- statement of the transaction that does the work. The primary key, not an if, decides
-- which of two concurrent copies wins: the second insert waits on the first transaction's
-- index entry, then finds a conflict (first committed: skip) or inserts (first rolled back).
CREATE TABLE inbox (
    message_id   uuid        NOT NULL,
    consumer     text        NOT NULL,
    content_hash bytea       NOT NULL,
    event_type   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, consumer)
);

CREATE INDEX inbox_processed_at ON inbox (processed_at);

-- +goose Down
DROP TABLE inbox;
