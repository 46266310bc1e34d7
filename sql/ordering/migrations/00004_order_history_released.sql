-- +goose Up
-- inventory.stock-released.v1 ends a cancelled order's history: inventory has given back
-- what it reserved for it.
ALTER TABLE order_history DROP CONSTRAINT order_history_event_check;
ALTER TABLE order_history ADD CONSTRAINT order_history_event_check CHECK (event IN ('placed', 'confirmed', 'rejected', 'cancelled', 'released'));

-- +goose Down
DELETE FROM order_history WHERE event = 'released';
ALTER TABLE order_history DROP CONSTRAINT order_history_event_check;
ALTER TABLE order_history ADD CONSTRAINT order_history_event_check CHECK (event IN ('placed', 'confirmed', 'rejected', 'cancelled'));
