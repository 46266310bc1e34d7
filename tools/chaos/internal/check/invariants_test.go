package check

import (
	"strings"
	"testing"
)

// One test per invariant of docs/contracts.md: each takes a clean snapshot, shows that it
// passes, breaks exactly that invariant the way a faulty design would, and asserts that
// the checker names the violation under the verdict that holds the invariant (7 and 8 are
// folded into 3, 9 into 4, as docs/contracts.md says).

// assertCaught checks that clean passes every invariant and that, once broken, only
// verdict fails, with exactly the violations of want.
func assertCaught(t *testing.T, clean Snapshot, breakIt func(s *Snapshot), verdict int, want map[string]int) {
	t.Helper()
	for _, v := range Check(clean) {
		if !v.Passed {
			t.Fatalf("the clean snapshot fails invariant %d: %v %v", v.Invariant, v.Counts, v.Examples)
		}
	}
	breakIt(&clean)
	assertOnly(t, clean, verdict, want)
}

func TestInvariant1EveryOrderAnswered201Exists(t *testing.T) {
	// The API said 201 for order 0, and the order is gone (with it its outcome and email,
	// which would break other invariants, so its effects go too: only the loss remains).
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.Orders = s.Orders[1:]
		s.Notifications = s.Notifications[1:]
		s.Emails = s.Emails[1:]
		s.Books[0].Reserved -= 2
		s.Books[1].Reserved--
	}, 1, map[string]int{lostOrder: 1})
}

func TestInvariant2NoOrderIsLeftPending(t *testing.T) {
	// Order 2's OrderPlaced was never published (the direct publisher's loss): it stays
	// pending, nothing reserved for it, no email sent for it.
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.Orders[2].Status = StatusPending
		s.Notifications = s.Notifications[:2]
		s.Emails = s.Emails[:2]
	}, 2, map[string]int{stuckPending: 1})
}

func TestInvariant3ReservedEqualsTheConfirmedQuantities(t *testing.T) {
	// A duplicate OrderPlaced was processed twice by a naive consumer.
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.Books[0].Reserved += 2
	}, 3, map[string]int{ReservedMismatch: 1})
}

func TestInvariant4EveryOrderHasExactlyOneEmail(t *testing.T) {
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.Emails = s.Emails[1:]
	}, 4, map[string]int{missingEmail: 1})
}

func TestInvariant5EveryOutboxIsDrained(t *testing.T) {
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.Outboxes[1].Pending = 3
		s.Outboxes[0].Dead = 1
	}, 5, map[string]int{outboxNotDrained: 1, outboxDead: 1})
}

func TestInvariant6DeadLettersAreExactlyTheInjectedPoison(t *testing.T) {
	// A good event that ran out of deliveries and was dead-lettered.
	var broken Snapshot
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.DeadLetters = append(s.DeadLetters, DeadLetter{Queue: "ordering.stock-events", MessageID: "018f2b1e-9999-7000-8000-000000000001", Body: []byte(`{"specversion":"1.0"}`), Reason: "delivery_limit"})
		broken = *s
	}, 6, map[string]int{unexpectedDead: 1})
	// The violation says why RabbitMQ dead-lettered it: here, returned too often.
	if ex := Check(broken)[5].Examples; len(ex) != 1 || !strings.Contains(ex[0].Detail, "dead-lettered as delivery_limit") {
		t.Errorf("examples %+v, want the reason delivery_limit", ex)
	}
}

func TestInvariant7ACancelledOrderHoldsNoReservation(t *testing.T) {
	// The sequence ignored: the placement applied after its cancellation keeps the copies.
	assertCaught(t, cancelledSnapshot(), func(s *Snapshot) {
		s.Books[0].Reserved += 2
		s.Books[1].Reserved++
	}, 3, map[string]int{ReservedMismatch: 2})
}

func TestInvariant8ACancelledOrderIsReleasedExactlyOnce(t *testing.T) {
	// The release applied twice (a duplicate OrderCancelled processed again): its copies
	// are given back twice, and reserved drops below what the confirmed orders hold.
	assertCaught(t, cancelledSnapshot(), func(s *Snapshot) {
		s.Books[0].Reserved -= 2
		s.Books[1].Reserved--
	}, 3, map[string]int{ReservedMismatch: 2})
}

func TestInvariant9ACancelledOrderHasItsCancellationEmail(t *testing.T) {
	assertCaught(t, cancelledSnapshot(), func(s *Snapshot) {
		s.Emails = s.Emails[:len(s.Emails)-1]
	}, 4, map[string]int{missingCancelEmail: 1})
}

// Invariant 10 is the heavy faults' own checks: a twin that published, an alarm whose
// backlog did not drain and a queue never declared again each fail it; a fault that was
// not checked (the clean snapshot has one) does not.
func TestInvariant10EachHeavyFaultPassesItsOwnCheck(t *testing.T) {
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.FaultChecks[0].Check = &FaultCheck{Checked: true, Violation: TwinPublished, Detail: "published 12"}
		s.FaultChecks[1].Check = &FaultCheck{Checked: true, Violation: AlarmNotDrained, Detail: "3 rows"}
		s.FaultChecks[2].Check = &FaultCheck{Checked: true, Violation: QueueNotRestored, Detail: "missing"}
	}, 10, map[string]int{TwinPublished: 1, AlarmNotDrained: 1, QueueNotRestored: 1})
}
