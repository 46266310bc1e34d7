package check

import (
	"fmt"
	"maps"
	"slices"
)

// Violation kinds of invariant 11.
const (
	HarnessError   = "fault not injected: the harness's own error"
	missedNoReason = "fault missed without a stated reason"
)

// checkInjection is invariant 11, the harness's own: a fault kind must not silently stop
// being tested. A fault may be missed for a state of the system, with the reason in its
// note (no queue to delete emptied in time, a broker version without the feature, a
// process held down by another fault); such misses are counted by kind, with a reason
// each. A fault the harness could not inject, or undo, because of its own error (a
// management API call, a Toxiproxy call, a statement of its own that failed) fails the
// run with that error, and so does a miss with no reason at all.
func checkInjection(s Snapshot) Verdict {
	b := newVerdict(11, "every scheduled fault injected, or missed for a stated reason of the system's")
	b.v.Checked = len(s.Faults)
	missed := map[string]int{}
	reason := map[string]string{}
	for _, f := range s.Faults {
		subject := fmt.Sprintf("%s %d (%s)", f.Kind, f.ID, f.Target)
		switch {
		case f.Error != "":
			b.fail(HarnessError, subject, "%s", f.Error)
		case f.Fired:
		case f.Note == "":
			b.fail(missedNoReason, subject, "not fired, and nothing says why")
		default:
			missed[f.Kind]++
			if reason[f.Kind] == "" {
				reason[f.Kind] = f.Note
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(missed)) {
		b.note("%d %s missed for the system's state, e.g. %s", missed[k], k, reason[k])
	}
	return b.done()
}
