-- The platform's wrong designs' own queries (services/platform/wrongways), beside the
-- relay's rather than among them.

-- name: TakeOverClaims :execrows
-- Every live claim under relay_id made claimable at once: what a relay process that
-- trusts its id to be its own does with the claims it finds under it, taking them for a
-- dead predecessor's. Under a live twin they are that twin's rows in flight.
UPDATE outbox
SET claimed_until = NULL
WHERE claimed_by = sqlc.arg(relay_id)::text AND state = 'pending' AND claimed_until IS NOT NULL;
