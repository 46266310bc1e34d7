package check

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The liveness tests feed the checker samples a run could have taken: every 250 ms, for
// both outboxes, what was pending and what had waited, and whether the relays were ready.

const sampleEvery = 250 * time.Millisecond

// cleanLiveness is 20 s of a healthy run from t0: a kill of ordering-1 from 4 s to 5 s
// leaves ordering's outbox a backlog, published again 0.5 s after the kill's end and
// drained 1.5 s after it; a provider fault from 10 s to 12 s touches no relay. A row
// waits at most 0.5 s, and a missed failpoint says why.
func cleanLiveness(t0 time.Time) ([]Fault, *Liveness) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	faults := []Fault{
		{ID: 1, Kind: FaultKill, Target: "ordering-1", Start: at(4 * time.Second), End: at(5 * time.Second), Fired: true},
		{ID: 2, Kind: FaultProviderFail, Target: "emailprovider", Start: at(10 * time.Second), End: at(12 * time.Second), Fired: true},
		{ID: 3, Kind: FaultFailpoint, Target: "inventory-2", Start: at(14 * time.Second), End: at(15 * time.Second), Note: "did not fire within its windows; disarmed"},
	}
	l := &Liveness{Bound: 2 * time.Second, Grace: 2 * time.Second, Interval: sampleEvery}
	for d := time.Duration(0); d <= 20*time.Second; d += sampleEvery {
		for _, svc := range []string{"ordering", "inventory"} {
			s := LivenessSample{At: at(d), Service: svc, Relays: 2, Ready: 2, LastPublished: at(d - 100*time.Millisecond)}
			if svc == "ordering" && d >= 4*time.Second && d < 6500*time.Millisecond {
				// Written from 3.9 s on, the backlog waits for the kill's end.
				s.OldestPending, s.Backlog = at(3900*time.Millisecond), 40
				if d < 5500*time.Millisecond {
					s.LastPublished = at(3800 * time.Millisecond)
				}
			}
			if d%time.Second == 0 {
				s.Waiting = []WaitingRow{{EventID: fmt.Sprintf("%s-%v", svc, d), Type: svc + ".something.v1", Since: at(d - 500*time.Millisecond)}}
			}
			l.Samples = append(l.Samples, s)
		}
	}
	return faults, l
}

// waitingRow puts one claimable row in every sample of service from `from` to `to`
// (offsets from the first sample), claimable since `from`.
func waitingRow(s *Snapshot, service, id string, from, to time.Duration) {
	t0 := s.Liveness.Samples[0].At
	for i := range s.Liveness.Samples {
		smp := &s.Liveness.Samples[i]
		if smp.Service == service && !smp.At.Before(t0.Add(from)) && !smp.At.After(t0.Add(to)) {
			smp.Waiting = append(smp.Waiting, WaitingRow{EventID: id, Type: "ordering.order-placed.v1", Since: t0.Add(from)})
		}
	}
}

func TestInvariant12ARowClaimableForLongerThanTheBoundBetweenFaultsIsCaught(t *testing.T) {
	// From 8 s to 11 s nothing strikes ordering's relay (the provider fault does not):
	// a row claimable for 3 s with both relays ready is a relay that stopped publishing.
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		waitingRow(s, "ordering", "018f-stuck", 8*time.Second, 11*time.Second)
	}, 12, map[string]int{ClaimableWaited: 1})
	s := cleanSnapshot()
	waitingRow(&s, "ordering", "018f-stuck", 8*time.Second, 11*time.Second)
	v := Check(s)[8]
	if got := v.Examples[0]; !strings.Contains(got.Subject, "018f-stuck (ordering.order-placed.v1)") || !strings.Contains(got.Detail, "2 of 2 relays ready") {
		t.Errorf("the violation does not name the row, its type and the relays: %+v", got)
	}
	if notes := strings.Join(v.Notes, "\n"); !strings.Contains(notes, "the longest wait in them: 3s, ordering 018f-stuck") {
		t.Errorf("the note does not give the longest wait: %s", notes)
	}
}

// A hopeless message holds up no relay (it is one message in notification's queue, and a
// refusal at the provider), so a row that waits past the bound beside it is still
// caught. The smoke run had a late commit's wait excused by a hopeless fault.
func TestInvariant12AHopelessMessageExcusesNoRelaysWait(t *testing.T) {
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		t0 := s.Liveness.Samples[0].At
		s.Faults = append(s.Faults, Fault{ID: 9, Kind: FaultHopeless, Target: "notification.stock-events",
			Start: t0.Add(8 * time.Second), End: t0.Add(9 * time.Second), Fired: true})
		waitingRow(s, "ordering", "018f-stuck", 8*time.Second, 11*time.Second)
	}, 12, map[string]int{ClaimableWaited: 1})
}

// notReady marks ordering's relays not ready from `from` to `to` (offsets).
func notReady(s *Snapshot, from, to time.Duration) {
	t0 := s.Liveness.Samples[0].At
	for i := range s.Liveness.Samples {
		if smp := &s.Liveness.Samples[i]; smp.Service == "ordering" && smp.At.Sub(t0) >= from && smp.At.Sub(t0) <= to {
			smp.Ready = 0
		}
	}
}

// A long transaction strikes no relay: its snapshot may slow the claims, not stop them.
// Relays that report not ready under it for longer than the bound, while rows wait and
// no other fault strikes them, are caught, though readiness would excuse a wait: the
// relays had stopped, and said so, but no fault had stopped them.
func TestInvariant12CatchesRelaysStalledUnderALongTransaction(t *testing.T) {
	longTx := func(s *Snapshot) {
		t0 := s.Liveness.Samples[0].At
		s.Faults = append(s.Faults, Fault{ID: 9, Kind: FaultLongTransaction, Target: "ordering,inventory,notification",
			Start: t0.Add(7 * time.Second), End: t0.Add(19 * time.Second), Fired: true})
	}
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		longTx(s)
		notReady(s, 8*time.Second, 12*time.Second)
		waitingRow(s, "ordering", "held-back", 8*time.Second, 12*time.Second)
	}, 12, map[string]int{StalledUnderSnapshot: 1})

	// Not ready for less than the bound, or with nothing waiting, or with no snapshot
	// held: not a stall of the snapshot's.
	for name, breakIt := range map[string]func(s *Snapshot){
		"a second": func(s *Snapshot) {
			longTx(s)
			notReady(s, 8*time.Second, 9*time.Second)
			waitingRow(s, "ordering", "held-back", 8*time.Second, 9*time.Second)
		},
		"nothing waiting": func(s *Snapshot) { longTx(s); notReady(s, 8*time.Second, 12*time.Second) },
		"no snapshot": func(s *Snapshot) {
			notReady(s, 8*time.Second, 12*time.Second)
			waitingRow(s, "ordering", "held-back", 8*time.Second, 12*time.Second)
		},
	} {
		s := cleanSnapshot()
		breakIt(&s)
		if v := Check(s)[8]; !v.Passed {
			t.Errorf("%s: invariant 12 failed: %v %v", name, v.Counts, v.Examples)
		}
	}
}

func TestInvariant12TheBoundDoesNotApplyDuringAFaultOrItsGraceOrWhileNoRelayIsReady(t *testing.T) {
	cases := map[string]func(s *Snapshot){
		// The kill of ordering-1 (4-5 s) and its grace (to 7 s; the drain ends at 6.5 s).
		"during a fault and its grace": func(s *Snapshot) { waitingRow(s, "ordering", "in-kill", 3*time.Second, 6750*time.Millisecond) },
		// The wait counts from the grace's end: 7 s to 8.5 s is within the bound.
		"counted from the grace's end": func(s *Snapshot) { waitingRow(s, "ordering", "after-kill", 3*time.Second, 8500*time.Millisecond) },
		// No relay of ordering ready from 16 s to 17 s: counted from 17 s.
		"no relay ready": func(s *Snapshot) {
			for i := range s.Liveness.Samples {
				if smp := &s.Liveness.Samples[i]; smp.Service == "ordering" && smp.At.Sub(s.Liveness.Samples[0].At) >= 16*time.Second && smp.At.Sub(s.Liveness.Samples[0].At) <= 17*time.Second {
					smp.Ready = 0
				}
			}
			waitingRow(s, "ordering", "not-ready", 15*time.Second, 18500*time.Millisecond)
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			s := cleanSnapshot()
			breakIt(&s)
			if v := Check(s)[8]; !v.Passed {
				t.Errorf("invariant 12 failed: %v %v", v.Counts, v.Examples)
			}
		})
	}
	// The exclusions are not blanket ones: the same row, 1 s longer, is caught, and so is
	// one of ordering's that waits through a fault of inventory's link.
	s := cleanSnapshot()
	waitingRow(&s, "ordering", "after-kill", 3*time.Second, 9500*time.Millisecond)
	if v := Check(s)[8]; v.Passed {
		t.Errorf("a row claimable 2.5 s after the grace's end passed")
	}
	s = cleanSnapshot()
	s.Faults[0].Target = "inventory-1-postgres"
	waitingRow(&s, "ordering", "not-struck", 3*time.Second, 6*time.Second)
	if v := Check(s)[8]; v.Passed {
		t.Errorf("a fault of inventory's link excused a row of ordering's")
	}
}

func TestRecoveriesMeasureTheFirstPublicationAndTheDrainAfterEachFault(t *testing.T) {
	s := cleanSnapshot()
	recs := Recoveries(s.Liveness, s.Faults)
	if len(recs) != 3 {
		t.Fatalf("got %d recoveries, want one per started fault (3): %+v", len(recs), recs)
	}
	kill := recs[0]
	if kill.Backlog != 40 || kill.Published != 500*time.Millisecond || kill.Drained != 1500*time.Millisecond {
		t.Errorf("the kill's recovery: backlog %d, published again after %v, drained after %v; want 40, 500ms, 1.5s", kill.Backlog, kill.Published, kill.Drained)
	}
	if p := recs[1]; p.Backlog != 0 || p.Published != 0 || p.Drained != 0 {
		t.Errorf("a fault with no backlog at its end: %+v, want zeros", p)
	}
}

func TestInvariant12CatchesABacklogThatNeverDrainsAfterAFault(t *testing.T) {
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		// Ordering's rows from before the kill's end stay pending to the end of the
		// sampling, more than DrainLimit later.
		last := s.Liveness.Samples[len(s.Liveness.Samples)-1].At
		for i := range s.Liveness.Samples {
			if smp := &s.Liveness.Samples[i]; smp.Service == "ordering" && smp.At.Sub(s.Liveness.Samples[0].At) >= 4*time.Second {
				smp.OldestPending, smp.Backlog = s.Liveness.Samples[0].At.Add(3900*time.Millisecond), 40
			}
		}
		s.Liveness.Samples = append(s.Liveness.Samples, LivenessSample{At: last.Add(DrainLimit), Service: "ordering", Relays: 2, Ready: 2,
			OldestPending: s.Liveness.Samples[0].At.Add(3900 * time.Millisecond), Backlog: 1})
	}, 12, map[string]int{NotRecovered: 1})
}

func TestInvariant11AFaultTheHarnessCouldNotInjectFailsTheRun(t *testing.T) {
	assertCaught(t, cleanSnapshot(), func(s *Snapshot) {
		s.Faults = append(s.Faults,
			Fault{ID: 4, Kind: FaultQueueFull, Target: "inventory.order-placed", Note: "policy: PUT /api/policies/chaoscluster/chaos-queue-full: broker management: not found",
				Error: "policy: PUT /api/policies/chaoscluster/chaos-queue-full: broker management: not found"},
			Fault{ID: 5, Kind: FaultKill, Target: "ordering-2"}) // not fired, and no reason
	}, 11, map[string]int{HarnessError: 1, missedNoReason: 1})
}

func TestInvariant11AFaultMissedForTheSystemsStateIsReportedWithItsReason(t *testing.T) {
	s := cleanSnapshot()
	s.Faults = append(s.Faults, Fault{ID: 4, Kind: FaultConsumerTimeout, Target: "inventory-1",
		Note: "skipped: RabbitMQ 3.10.8 has only the node-wide consumer_timeout"})
	v := Check(s)[7]
	if v.Invariant != 11 || !v.Passed {
		t.Fatalf("verdict %d passed=%v %v", v.Invariant, v.Passed, v.Examples)
	}
	if want := "1 consumer_timeout missed for the system's state, e.g. skipped: RabbitMQ 3.10.8"; !strings.Contains(strings.Join(v.Notes, "\n"), want) {
		t.Errorf("notes %q, want one saying %q", v.Notes, want)
	}
}

// A row is written at its transaction's start (created_at) and claimable only once the
// transaction commits: a consumer's transaction that took 2.5 s under load leaves a row
// whose created_at is 2.5 s old the moment a relay could first see it. The samples
// before the commit prove it (none of them holds a pending row as old), and its wait
// counts from the last of them; the same row already pending in them is caught.
func TestInvariant12CountsARowsWaitFromTheLastSampleThatCouldNotSeeItYet(t *testing.T) {
	s := cleanSnapshot()
	t0 := s.Liveness.Samples[0].At
	waitingRow(&s, "inventory", "late-commit", 8*time.Second, 11*time.Second)
	for i := range s.Liveness.Samples {
		smp := &s.Liveness.Samples[i]
		if smp.Service != "inventory" {
			continue
		}
		switch d := smp.At.Sub(t0); {
		case d >= 8*time.Second && d < 10500*time.Millisecond:
			// Not committed yet: what is pending is younger, or nothing is.
			smp.Waiting, smp.OldestPending, smp.Backlog = nil, time.Time{}, 0
			if d < 9*time.Second {
				smp.OldestPending, smp.Backlog = t0.Add(8200*time.Millisecond), 3
			}
		}
	}
	if v := Check(s)[8]; !v.Passed {
		t.Errorf("a row claimable for 0.5 s after its commit failed invariant 12: %v %v", v.Counts, v.Examples)
	}

	s = cleanSnapshot()
	waitingRow(&s, "inventory", "pending-all-along", 8*time.Second, 11*time.Second)
	if v := Check(s)[8]; v.Passed {
		t.Error("a row pending and claimable for 3 s in every sample passed invariant 12")
	}
}
