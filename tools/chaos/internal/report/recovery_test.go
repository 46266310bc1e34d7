package report

import (
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

func TestARecoveryCountsTheRefusalsAndTimeoutsUntilTheFirstAcceptedOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	try := func(s float64, status int, timeout bool) check.Try {
		return check.Try{At: at(s), Took: 100 * time.Millisecond, Status: status, Timeout: timeout}
	}
	history := []check.ClientOp{
		{Tries: []check.Try{try(-1, 201, false), try(0.5, 503, false), try(1, 503, false)}},
		{Tries: []check.Try{try(2, 0, true), try(6, 201, false)}},
		{Tries: []check.Try{try(4, 201, false), try(7, 201, false)}}, // the first 201 after the kill: 4.1 s
		{Tries: []check.Try{try(4.5, 503, false), try(9, 503, false)}},
	}
	faults := []check.Fault{
		{Kind: check.FaultPostgresFailover, Fired: true, Recovery: &check.Recovery{Killed: at(0), Promoted: at(4.6), Restored: at(10)}},
		{Kind: check.FaultPostgresFailover, Fired: true, Recovery: &check.Recovery{Killed: at(8), Restored: at(8.5), Drained: -1}},
	}
	orders := []check.Order{{CustomerEmail: "a@example.com", CreatedAt: at(1)}, {CustomerEmail: "b@example.com", CreatedAt: at(5.5)}}
	emails := []check.SentEmail{
		{To: "a@example.com", IdempotencyKey: "order/1/order-confirmed", CreatedAt: at(11)},
		{To: "b@example.com", IdempotencyKey: "order/2/order-cancelled", CreatedAt: at(12)}, // not an outcome email
	}
	AddClientRecovery(faults, history, orders, emails)
	r := faults[0].Recovery
	// Until accepted and promoted: the tries at 0.5, 1, 2, 4 and 4.5 s.
	if r.Accepted != 4100*time.Millisecond || r.Refused != 3 || r.TimedOut != 1 || r.Tries != 5 || r.Emailed != 11*time.Second {
		t.Errorf("got accepted %v, %d refused, %d timed out of %d tries, emailed %v; want 4.1s, 3, 1 of 5, 11s", r.Accepted, r.Refused, r.TimedOut, r.Tries, r.Emailed)
	}
	// Until back: those and the tries at 6, 7 and 9 s.
	if r.RefusedUntilBack != 4 || r.TimedOutUntilBack != 1 || r.TriesUntilBack != 8 {
		t.Errorf("until back: %d refused, %d timed out of %d tries; want 4, 1 of 8", r.RefusedUntilBack, r.TimedOutUntilBack, r.TriesUntilBack)
	}
	if r := faults[1].Recovery; r.Accepted != -1 || r.Refused != 1 {
		t.Errorf("a fault with no 201 after it: accepted %v, %d refused; want -1 (never), 1", r.Accepted, r.Refused)
	}
	var b strings.Builder
	PrintRecoveryTable(&b, faults)
	if !strings.Contains(b.String(), "| `postgres_failover` | 2 | 4.1 s / never | 0.0 s / never | 3.0 s / 11.0 s | 1 / 3 | 0 / 1 |") {
		t.Errorf("table:\n%s", b.String())
	}
}
