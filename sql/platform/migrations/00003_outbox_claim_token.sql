-- +goose Up
-- The process that holds a claim. claimed_by names a relay (RELAY_ID), which two processes
-- may share by mistake, or a restarted process takes over; the token is made anew by every
-- process, so a process only records, releases or retakes at once the claims it made
-- itself, never the rows another live process is publishing.
ALTER TABLE outbox ADD COLUMN claim_token uuid;

-- +goose Down
ALTER TABLE outbox DROP COLUMN claim_token;
