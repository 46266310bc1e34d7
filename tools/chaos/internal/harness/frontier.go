package harness

import (
	"time"

	"github.com/google/uuid"
)

// CommitWindow is the relays' commit window (outbox's commitWindow): their claim starts
// at the oldest pending row they found or at the ids made this long before their last
// look, whichever is older. The harness's reads of an outbox start the same way.
const CommitWindow = 10 * time.Second

// IDFloor is the smallest UUIDv7 made at t or later: its first 48 bits are t in Unix
// milliseconds, and Postgres orders uuids byte by byte (outbox's idFloor).
func IDFloor(t time.Time) uuid.UUID {
	var id uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = 0x70 // version 7
	return id
}
