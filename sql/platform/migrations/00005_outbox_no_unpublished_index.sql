-- +goose Up
-- The planner's picture of a partial index is its live rows: outbox_unpublished_by_aggregate
-- looked a few rows small, so the planner chose to read it whole, for each row claimed
-- (the predecessor check as an anti-join) and for each batch marked (MarkPublished, whose
-- state IN ('pending', 'dead') implies its predicate). A snapshot held for minutes keeps
-- every entry it ever had, each version a claim or a mark left, and the reads then ran
-- past the statement timeout: relays stopped for minutes in a two-hour soak
-- (TestAClaimUnderAHeldSnapshotTakesNoLongerAfterRowsPassed). The predecessor check uses
-- the unique (aggregate_type, aggregate_id, sequence) index instead, whose size the
-- planner knows; dead rows, which only the operator's commands and the metrics count,
-- get an index of their own.
DROP INDEX outbox_unpublished_by_aggregate;
CREATE INDEX outbox_dead ON outbox (id) WHERE state = 'dead';

-- +goose Down
DROP INDEX outbox_dead;
CREATE INDEX outbox_unpublished_by_aggregate ON outbox (aggregate_type, aggregate_id, sequence) WHERE state <> 'published';
