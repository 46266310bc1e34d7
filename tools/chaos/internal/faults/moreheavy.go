package faults

import (
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// How long the kinds of this file keep the system busy as the schedule reckons it, for
// keeping them clear of the outages: what a recovery takes, a few seconds, not the bound,
// which is for a slow one. The default run's outages leave gaps of 13-25 s; faults
// reckoned at their bounds (20-45 s) found room only after the last one, at the load's
// end. A fault an outage overlaps all the same is not checked (its note says which).
const (
	exchangeBusy = 10 * time.Second // the relays' poll, a backoff, a declare and the drain
	sessionBusy  = 12 * time.Second // a pool's redial, the relay's lock taken again, /readyz
	hopelessBusy = 10 * time.Second // one delivery and its dead-lettering
)

// scheduleMoreHeavy sets the target, detail and duration of the i-th fault of the heavy
// kinds of exchange.go, sessions.go and hopeless.go, and returns how long it keeps the
// system busy (for keeping it clear of outages); false when the run has no target for it.
// Each kind cycles through its targets.
func scheduleMoreHeavy(f *check.Fault, i int, relays []string) (time.Duration, bool) {
	switch f.Kind {
	case check.FaultExchangeDeleted:
		f.Target, f.Detail = contracts.Exchange, "deleted with its bindings; the relays declare and bind it again"
		return exchangeBusy, true
	case check.FaultSessionKilled:
		f.Target = []string{"ordering", "inventory"}[i%2]
		f.Detail = "pg_terminate_backend of every session of " + f.Target + "'s role"
		return sessionBusy, true
	case check.FaultHalfOpen:
		if len(relays) == 0 {
			return 0, false
		}
		f.Target = relays[i%len(relays)]
		f.Detail = "every Postgres connection closed on the client's side, the server's kept " + halfOpenKeep.String()
		return sessionBusy, true
	case check.FaultHopeless:
		f.Target = hopelessQueue
		f.Detail = "a valid stock event whose recipient the provider refuses for good (refuse_to)"
		return hopelessBusy, true
	}
	return 0, false
}
