-- +goose Up
-- The two-phase record of one email: one row per order and kind of email, so however many
-- times (and under however many message ids) an order's outcome arrives, it asks for one
-- email. The row is committed as 'processing' BEFORE the provider is called and marked
-- 'completed' after, so a crash in between leaves a row that says "the provider may or may
-- not have it: ask before sending again", never silence.
CREATE TABLE notifications (
    order_id          uuid        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('order-confirmed', 'order-rejected')),
    status            text        NOT NULL DEFAULT 'processing'
                                  CHECK (status IN ('processing', 'completed', 'needs-reconciliation', 'failed')),
    idempotency_key   text        NOT NULL UNIQUE,      -- the provider's key: order/<order_id>/<kind>
    recipient         text        NOT NULL,
    subject           text        NOT NULL,             -- subject and body are fixed at the first commit:
    body              text        NOT NULL,             -- every retry must send the same request, or the provider answers 422
    event_id          uuid        NOT NULL,             -- the first event that asked for this email
    attempts          int         NOT NULL DEFAULT 0,   -- claims to talk to the provider so far
    claim_token       uuid,                             -- who is talking to the provider now
    claimed_until     timestamptz,                      -- ... until when; after that anyone may take over
    provider_email_id text,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    PRIMARY KEY (order_id, kind)
);

-- What the sweeper looks for: records nobody has finished.
CREATE INDEX notifications_unfinished ON notifications (updated_at)
    WHERE status IN ('processing', 'needs-reconciliation');

-- +goose Down
DROP TABLE notifications;
