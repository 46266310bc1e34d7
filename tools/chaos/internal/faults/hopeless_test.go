package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// The soak's heaviest window kept a hopeless message 50 s in notification's queue behind
// the backlog; the consumer parked it at its first delivery, and the check counted the
// queue's wait against the consumer's bound.
func TestAHopelessMessageIsTimedFromItsFirstDeliveryNotFromItsPublish(t *testing.T) {
	published := time.Now().Add(-time.Minute)
	at := func(s float64) time.Time { return published.Add(time.Duration(s * float64(time.Second))) }
	for _, c := range []struct {
		name               string
		delivered, parked  time.Time
		violation, mention string
	}{
		{"queued 50s behind a backlog, parked at its first delivery", at(50), at(52.3), "", "2.3s after its first delivery (it waited 50.0s for it)"},
		{"delivered at once, requeued for 50s before it was parked", at(0.2), at(50.2), check.HopelessNotParked, "50.0s after its first delivery"},
		{"parked with no delivery seen, timed from its publish", time.Time{}, at(50), check.HopelessNotParked, "50.0s after its publish (no delivery seen; its email record failed)"},
		{"delivered and never parked", at(1), time.Time{}, check.HopelessNotParked, "delivered after 1.0s"},
		{"never delivered", time.Time{}, time.Time{}, check.HopelessNotParked, "not delivered"},
	} {
		got := hopelessVerdict("m", "q.dlq", "failed", published, c.delivered, c.parked)
		if got.Violation != c.violation || !strings.Contains(got.Detail, c.mention) {
			t.Errorf("%s: violation %q, detail %q; want violation %q and a detail saying %q", c.name, got.Violation, got.Detail, c.violation, c.mention)
		}
	}
}
