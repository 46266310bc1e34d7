-- +goose Up
-- The "order cancelled" email (inventory.stock-released.v1), one per cancelled order,
-- under its own provider key order/<order_id>/order-cancelled.
ALTER TABLE notifications DROP CONSTRAINT notifications_kind_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_kind_check CHECK (kind IN ('order-confirmed', 'order-rejected', 'order-cancelled'));

-- +goose Down
DELETE FROM notifications WHERE kind = 'order-cancelled';
ALTER TABLE notifications DROP CONSTRAINT notifications_kind_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_kind_check CHECK (kind IN ('order-confirmed', 'order-rejected'));
