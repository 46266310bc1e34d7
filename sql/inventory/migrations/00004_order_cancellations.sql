-- +goose Up
-- Cancellations (ordering.order-cancelled.v1). order_answers becomes the one row per
-- order that both of the order's events meet, in the inbox's transaction:
--   last_sequence  the sequence of the last of the order's events applied here; an event
--                  at or below it is stale and changes nothing.
--   cancelled_at   when its cancellation was applied: its reservations were released then.
-- A cancellation that arrives before its placement writes the row itself, with outcome
-- 'cancelled' and the cancellation's sequence: a tombstone, which the placement, arriving
-- later with sequence 1, finds, and so it reserves nothing.
ALTER TABLE order_answers DROP CONSTRAINT order_answers_outcome_check;
ALTER TABLE order_answers ADD CONSTRAINT order_answers_outcome_check CHECK (outcome IN ('reserved', 'rejected', 'cancelled'));
ALTER TABLE order_answers ADD COLUMN last_sequence bigint NOT NULL DEFAULT 1 CHECK (last_sequence > 0);
ALTER TABLE order_answers ADD COLUMN cancelled_at timestamptz;
ALTER TABLE order_answers ADD CONSTRAINT order_answers_cancelled CHECK (outcome <> 'cancelled' OR cancelled_at IS NOT NULL);

-- +goose Down
DELETE FROM order_answers WHERE outcome = 'cancelled';
ALTER TABLE order_answers DROP CONSTRAINT order_answers_cancelled;
ALTER TABLE order_answers DROP COLUMN cancelled_at;
ALTER TABLE order_answers DROP COLUMN last_sequence;
ALTER TABLE order_answers DROP CONSTRAINT order_answers_outcome_check;
ALTER TABLE order_answers ADD CONSTRAINT order_answers_outcome_check CHECK (outcome IN ('reserved', 'rejected'));
