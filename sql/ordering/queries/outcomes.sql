-- name: ApplyStockOutcomes :execrows
-- ApplyStockOutcome for the outcomes of a batch. Fewer rows than outcomes: some order was
-- not pending (decided before, or unknown), which the batch leaves to the one-at-a-time path.
UPDATE orders
SET status = o.status, version = orders.version + 1, updated_at = now()
FROM (SELECT unnest(sqlc.arg(ids)::uuid[]) AS id, unnest(sqlc.arg(statuses)::text[]) AS status) AS o
WHERE orders.id = o.id AND orders.status = 'pending';
