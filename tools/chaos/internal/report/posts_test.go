package report

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// Each attempt is counted by its answer and by what was going on when it was sent; the
// drain after an outage is how long the orders placed before its end took to be decided
// and emailed.
func TestSummarizePosts(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	faults := []check.Fault{
		{ID: 1, Kind: check.FaultPostgresOutage, Start: at(10), End: at(20), Fired: true},
		{ID: 2, Kind: check.FaultKill, Target: "ordering-2", Start: at(30), End: at(31), Fired: true},
		{ID: 3, Kind: check.FaultLatency, Target: "inventory-1-postgres", Start: at(40), End: at(42), Fired: true},
		{ID: 4, Kind: check.FaultKill, Target: "ordering-1", Start: at(50), End: at(51), Fired: false}, // missed: no window
	}
	h := []check.ClientOp{
		{Outcome: check.OutcomeOK, Tries: []check.Try{{At: at(1), Took: 10 * time.Millisecond, Status: http.StatusCreated}}},
		{Outcome: check.OutcomeFailed, Shed: 2, Tries: []check.Try{
			{At: at(12), Took: 2 * time.Millisecond, Status: http.StatusServiceUnavailable, RetryAfter: true},
			{At: at(13), Took: 3 * time.Millisecond, Status: http.StatusServiceUnavailable, RetryAfter: true},
		}},
		{Outcome: check.OutcomeUnknown, Tries: []check.Try{{At: at(30.5), Took: 3 * time.Second, Timeout: true}}},
		{Outcome: check.OutcomeOK, Tries: []check.Try{
			{At: at(41), Took: time.Second, Status: http.StatusServiceUnavailable}, // no Retry-After
			{At: at(50.5), Took: 20 * time.Millisecond, Status: http.StatusOK},
		}},
	}
	orders := []check.Order{
		{ID: uuid.New(), CustomerEmail: "a", Status: check.StatusConfirmed, CreatedAt: at(9), UpdatedAt: at(25)},
		{ID: uuid.New(), CustomerEmail: "b", Status: check.StatusRejected, CreatedAt: at(5), UpdatedAt: at(6)},
		{ID: uuid.New(), CustomerEmail: "c", Status: check.StatusCancelled, CreatedAt: at(9), UpdatedAt: at(40)},
		{ID: uuid.New(), CustomerEmail: "d", Status: check.StatusConfirmed, CreatedAt: at(21), UpdatedAt: at(60)},
	}
	emails := []check.SentEmail{
		{To: "a", IdempotencyKey: "order/x/order-confirmed", CreatedAt: at(27)},
		{To: "c", IdempotencyKey: "order/y/order-cancelled", CreatedAt: at(45)},
	}
	s := SummarizePosts(start, at(100), h, faults, orders, emails)
	if s.Tries != 6 || s.Accepted != 2 || s.Shed != 2 || s.Shed503NoRA != 1 || s.Timeouts != 1 || s.Rejected != 1 {
		t.Errorf("counts: %+v", s)
	}
	phases := map[string]PhaseStats{}
	for _, p := range s.Phases {
		phases[p.Phase] = p
	}
	if p := phases[phaseOutage]; p.Shed != 2 || p.Tries != 2 {
		t.Errorf("during the outage: %+v", p)
	}
	if p := phases[phaseOrdering]; p.Timeouts != 1 {
		t.Errorf("during a fault of ordering: %+v", p)
	}
	if p := phases[phaseOther]; p.Tries != 1 {
		t.Errorf("during other faults: %+v", p)
	}
	if p := phases[phaseBetween]; p.Accepted != 2 || p.AcceptedP99 != 20*time.Millisecond {
		t.Errorf("between faults: %+v", p)
	}
	if len(s.Drains) != 1 {
		t.Fatalf("drains %+v, want the outage's", s.Drains)
	}
	if d := s.Drains[0]; d.Backlog != 1 || d.Decided != 5*time.Second || d.Emailed != 7*time.Second {
		t.Errorf("drain %+v, want 1 order, decided 5s and emailed 7s after the end", d)
	}
}
