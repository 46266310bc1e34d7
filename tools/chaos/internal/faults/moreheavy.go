package faults

import (
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// exchangeBusy is how long exchange_deleted keeps the system busy as its schedule
// reckons it: a recovery takes a relay's poll and backoff, a few seconds; the bound
// (ExchangeRecoveryLimit) is for a slow one.
const exchangeBusy = 10 * time.Second

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
		return SessionRecoveryLimit + 5*time.Second, true
	case check.FaultHalfOpen:
		if len(relays) == 0 {
			return 0, false
		}
		f.Target = relays[i%len(relays)]
		f.Detail = "every Postgres connection closed on the client's side, the server's kept " + halfOpenKeep.String()
		return HalfOpenRecoveryLimit + 5*time.Second, true
	case check.FaultHopeless:
		f.Target = hopelessQueue
		f.Detail = "a valid stock event whose recipient the provider refuses for good (refuse_to)"
		return HopelessParkLimit, true
	}
	return 0, false
}
