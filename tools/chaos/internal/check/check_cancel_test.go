package check

import (
	"testing"
)

// cancelledSnapshot is cleanSnapshot with its first order cancelled by its client after
// it was confirmed: its copies given back, its confirmation and its cancellation emailed.
func cancelledSnapshot() Snapshot {
	s := cleanSnapshot()
	s.History[0].Cancel, s.History[0].CancelOutcome = true, OutcomeOK
	s.Orders[0].Status = StatusCancelled
	s.Books[0].Reserved -= 2
	s.Books[1].Reserved -= 1
	nkey := "notification-" + s.Orders[0].ID.String() + "-" + kindCancelled
	s.Notifications = append(s.Notifications, NotificationRecord{OrderID: s.Orders[0].ID, Kind: kindCancelled, Status: "completed", IdempotencyKey: nkey, Attempts: 1})
	s.Emails = append(s.Emails, SentEmail{ID: "c", IdempotencyKey: nkey, To: s.Orders[0].CustomerEmail, Deliveries: 1})
	return s
}

func TestACancelledOrderWithItsEmailsAndNoReservationPasses(t *testing.T) {
	for _, v := range Check(cancelledSnapshot()) {
		if !v.Passed {
			t.Errorf("invariant %d: %v %v", v.Invariant, v.Counts, v.Examples)
		}
	}
}

func TestALostCancellationIsCaught(t *testing.T) {
	s := cleanSnapshot()
	s.History[0].Cancel, s.History[0].CancelOutcome = true, OutcomeOK
	assertOnly(t, s, 2, map[string]int{lostCancellation: 1})
}

func TestASecondCancellationEmailIsCaught(t *testing.T) {
	s := cancelledSnapshot()
	s.Emails = append(s.Emails, SentEmail{ID: "d", IdempotencyKey: s.Emails[len(s.Emails)-1].IdempotencyKey + "-2", To: s.Orders[0].CustomerEmail, Deliveries: 1})
	s.Notifications = append(s.Notifications, NotificationRecord{OrderID: s.Orders[0].ID, Kind: kindCancelled, Status: "completed", IdempotencyKey: s.Emails[len(s.Emails)-1].IdempotencyKey, Attempts: 1})
	assertOnly(t, s, 4, map[string]int{duplicateEmail: 1})
}
