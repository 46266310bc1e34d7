-- +goose Up
-- Keys are forgotten once older than IDEMPOTENCY_KEY_RETENTION (orders.ForgetIdempotencyKeys):
-- the sweep finds them by age, in small batches, without reading the whole table.
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);

-- +goose Down
DROP INDEX idempotency_keys_created_at;
