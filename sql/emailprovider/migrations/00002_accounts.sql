-- +goose Up
-- Every email belongs to the account whose API key sent it, and an Idempotency-Key is
-- the account's own, as at a real provider: the same key from two accounts is two
-- emails, so nobody can take a customer's key first. Rows from before accounts keep the
-- account '' that no API key maps to: no caller sees them again.
ALTER TABLE emails ADD COLUMN account text NOT NULL DEFAULT '';
ALTER TABLE emails ALTER COLUMN account DROP DEFAULT;
ALTER TABLE emails DROP CONSTRAINT emails_idempotency_key_key;
ALTER TABLE emails ADD CONSTRAINT emails_account_idempotency_key_key UNIQUE (account, idempotency_key);
DROP INDEX emails_by_recipient;
CREATE INDEX emails_by_recipient ON emails (account, recipient, created_at);

-- +goose Down
DROP INDEX emails_by_recipient;
CREATE INDEX emails_by_recipient ON emails (recipient, created_at);
ALTER TABLE emails DROP CONSTRAINT emails_account_idempotency_key_key;
DELETE FROM emails a USING emails b
WHERE a.idempotency_key = b.idempotency_key AND (a.created_at, a.id) > (b.created_at, b.id);
ALTER TABLE emails ADD CONSTRAINT emails_idempotency_key_key UNIQUE (idempotency_key);
ALTER TABLE emails DROP COLUMN account;
