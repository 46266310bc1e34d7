-- +goose Up
-- Cancelling an order (POST /orders/{id}/cancel): a pending or confirmed order becomes
-- cancelled, and its ordering.order-cancelled.v1 goes through the outbox in the same
-- transaction, with the order's version after the change as its sequence.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('pending', 'confirmed', 'rejected', 'cancelled'));

-- What happened to an order and when, as GET /orders/{id} shows it: placed, confirmed or
-- rejected, cancelled. Each at most once, written in the transaction of the change.
CREATE TABLE order_history (
    order_id uuid        NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    event    text        NOT NULL CHECK (event IN ('placed', 'confirmed', 'rejected', 'cancelled')),
    at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, event)
);
INSERT INTO order_history (order_id, event, at) SELECT id, 'placed', created_at FROM orders;
INSERT INTO order_history (order_id, event, at) SELECT id, status, updated_at FROM orders WHERE status <> 'pending';

-- Idempotency-Key of POST /orders/{id}/cancel, as idempotency_keys is for POST /orders:
-- written with the cancellation and its outbox row, forgotten after the same retention.
CREATE TABLE cancel_idempotency_keys (
    key             text PRIMARY KEY,
    request_hash    bytea       NOT NULL,
    order_id        uuid        NOT NULL REFERENCES orders (id),
    response_status int         NOT NULL,
    response_body   bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cancel_idempotency_keys_created_at ON cancel_idempotency_keys (created_at);

-- +goose Down
DROP TABLE cancel_idempotency_keys;
DROP TABLE order_history;
DELETE FROM orders WHERE status = 'cancelled';
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('pending', 'confirmed', 'rejected'));
