-- +goose Up
CREATE TABLE orders (
    id             uuid PRIMARY KEY,
    customer_email text        NOT NULL,
    status         text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'confirmed', 'rejected')),
    version        bigint      NOT NULL DEFAULT 1,   -- the aggregate's sequence: 1 when placed
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE order_lines (
    order_id uuid NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    book_id  uuid NOT NULL,
    quantity int  NOT NULL CHECK (quantity BETWEEN 1 AND 100),
    PRIMARY KEY (order_id, book_id)
);

-- Idempotency-Key of POST /orders. The row is written in the same transaction as the
-- order and its outbox row: a crash before commit leaves no key behind, so the client's
-- retry with the same key places the order instead of replaying a response never sent.
CREATE TABLE idempotency_keys (
    key             text PRIMARY KEY,
    request_hash    bytea       NOT NULL,
    order_id        uuid        NOT NULL REFERENCES orders (id),
    response_status int         NOT NULL,
    response_body   bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE order_lines;
DROP TABLE orders;
