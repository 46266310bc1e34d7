-- +goose Up
-- One row per Idempotency-Key: the email the provider accepted and the response it gave.
-- The row is written in the same transaction that sends (deliveries = 1), under an
-- advisory lock on the key, so "sent" and "remembered as sent" commit together: a crash
-- before commit leaves neither, and a retry with the key sends afresh; after commit every
-- retry is answered from this row and nothing is sent again.
CREATE TABLE emails (
    id              uuid PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE,
    request_hash    bytea       NOT NULL,               -- sha256 of the decoded request: a replay must match it
    recipient       text        NOT NULL,               -- "to" in the API
    subject         text        NOT NULL,
    body            text        NOT NULL,               -- "text" in the API
    deliveries      int         NOT NULL CHECK (deliveries >= 0), -- times actually sent; 1 is the only correct value
    response_body   bytea       NOT NULL,               -- the 202 body, replayed byte for byte
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX emails_by_recipient ON emails (recipient, created_at);

-- +goose Down
DROP TABLE emails;
