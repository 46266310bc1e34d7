-- +goose Up
-- One answer per order, whatever message carried it. The inbox stops a second copy of a
-- message; this stops a second message about the same order (a producer duplicate under
-- a new id), for a rejection as much as for a reservation, which the reservations table
-- alone could not: a rejected order leaves no reservation behind.
CREATE TABLE order_answers (
    order_id    uuid PRIMARY KEY,
    outcome     text        NOT NULL CHECK (outcome IN ('reserved', 'rejected')),
    answered_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO order_answers (order_id, outcome)
SELECT DISTINCT order_id, 'reserved' FROM reservations;

-- +goose Down
DROP TABLE order_answers;
