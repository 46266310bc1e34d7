package check

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Liveness is what the harness sampled of the two outboxes and their relays during the
// run, every Interval from the start of the load until quiet: the checker's input for
// invariant 12, which asks not whether an event is published but how soon.
type Liveness struct {
	Bound    time.Duration    `json:"bound_ns"`    // the longest a claimable row may wait between faults while its relay is ready
	Grace    time.Duration    `json:"grace_ns"`    // after a fault's end (or its backlog's drain, if later) the bound does not apply yet
	Interval time.Duration    `json:"interval_ns"` // between two samples of a service
	Samples  []LivenessSample `json:"samples"`
}

// LivenessSample is one reading of one service's outbox and of the /readyz of the
// processes that run its relay.
type LivenessSample struct {
	At            time.Time    `json:"at"`
	Service       string       `json:"service"`                  // ordering | inventory
	Relays        int          `json:"relays"`                   // processes that run the service's relay
	Ready         int          `json:"ready"`                    // of them, those that answered /readyz 200
	Error         string       `json:"error,omitempty"`          // the outbox could not be read: the sample says nothing
	OldestPending time.Time    `json:"oldest_pending,omitzero"`  // created_at of the oldest pending row; zero: none
	LastPublished time.Time    `json:"last_published,omitzero"`  // the latest published_at
	Waiting       []WaitingRow `json:"waiting,omitempty"`        // claimable rows that had waited a while, longest first (a few)
	Backlog       int          `json:"backlog_rows,omitempty"`   // pending rows
	Deferred      int          `json:"deferred_rows,omitempty"`  // pending rows not available yet (a queue refused them: they wait for their own retry)
	Claimed       int          `json:"claimed_rows,omitempty"`   // pending rows under a live claim (being published, or a dead relay's lease)
	Claimable     int          `json:"claimable_rows,omitempty"` // the rest: any relay could claim them now
}

// WaitingRow is a claimable outbox row: pending, available (its available_at passed),
// not under a live claim, and its aggregate's previous event published. Since is the
// latest of its created_at, its available_at, its predecessor's publication and the end
// of its last claim's lease. created_at is its transaction's start, not its commit,
// which nothing records: a row whose transaction took seconds to commit has a Since
// from before it could be claimed (checkLiveness bounds that with the samples).
type WaitingRow struct {
	EventID string    `json:"event_id"`
	Type    string    `json:"type"`
	Since   time.Time `json:"since"`
}

// FaultRecovery is how long the outboxes took to recover from one fault, from the
// fault's end: until a row was published again (for a service that had a backlog then)
// and until every row written before the end was published.
type FaultRecovery struct {
	ID        int           `json:"id"`
	Kind      string        `json:"kind"`
	Target    string        `json:"target"`
	End       time.Time     `json:"end"`
	Backlog   int           `json:"backlog"`      // pending rows of both outboxes at the first sample after the end
	Published time.Duration `json:"published_ns"` // from the end to the first publication after it; 0: no backlog; -1: none sampled
	Drained   time.Duration `json:"drained_ns"`   // from the end until no row written before it was pending; -1: not while sampled
}

// Liveness violation kinds (invariant 12).
const (
	ClaimableWaited      = "claimable outbox row waited longer than the bound while its relay was ready"
	NotRecovered         = "outbox backlog not drained after a fault"
	StalledUnderSnapshot = "no relay of a service ready, with claimable rows waiting, under a long transaction and no fault striking the relay"
)

// DrainLimit is how long after a fault's end its backlog must have drained; a fault
// whose backlog had not drained by the last sample is a violation only if the sampling
// went on this long after its end.
const DrainLimit = 2 * time.Minute

// Recoveries measures each started fault's recovery from the samples, in the faults'
// order.
func Recoveries(l *Liveness, faults []Fault) []FaultRecovery {
	if l == nil {
		return nil
	}
	bySvc := samplesByService(l.Samples)
	var out []FaultRecovery
	for _, f := range faults {
		if f.Start.IsZero() || f.End.IsZero() {
			continue
		}
		out = append(out, recoveryOf(f, bySvc))
	}
	return out
}

func recoveryOf(f Fault, bySvc map[string][]LivenessSample) FaultRecovery {
	r := FaultRecovery{ID: f.ID, Kind: f.Kind, Target: f.Target, End: f.End}
	e := f.End
	for _, svc := range mapsKeys(bySvc) {
		ss := bySvc[svc]
		i, _ := slices.BinarySearchFunc(ss, e, func(s LivenessSample, t time.Time) int { return s.At.Compare(t) })
		if i == len(ss) {
			continue
		}
		first := ss[i]
		if first.OldestPending.IsZero() || first.OldestPending.After(e) {
			continue // nothing written before the end was pending: nothing to recover
		}
		r.Backlog += first.Backlog
		published, drained := time.Duration(-1), time.Duration(-1)
		for _, s := range ss[i:] {
			if published < 0 && s.LastPublished.After(e) {
				published = s.At.Sub(e)
			}
			if s.OldestPending.IsZero() || s.OldestPending.After(e) {
				drained = s.At.Sub(e)
				break
			}
		}
		r.Published = later(r.Published, published)
		r.Drained = later(r.Drained, drained)
	}
	return r
}

// later combines two services' times: the later one, and -1 (never) over any time.
func later(a, b time.Duration) time.Duration {
	if a < 0 || b < 0 {
		return -1
	}
	return max(a, b)
}

func samplesByService(samples []LivenessSample) map[string][]LivenessSample {
	by := map[string][]LivenessSample{}
	for _, s := range samples {
		if s.Error == "" {
			by[s.Service] = append(by[s.Service], s)
		}
	}
	for _, ss := range by {
		slices.SortFunc(ss, func(a, b LivenessSample) int { return a.At.Compare(b.At) })
	}
	return by
}

func mapsKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Strikes reports whether fault f can hold up service's relay: outages, the heavy and
// cluster faults and a broker restart strike every relay; a process or link fault only
// the relays of the service it names (ordering-1, ordering-relay-postgres,
// inventory-2-rabbitmq); the provider's faults, duplicates, poison and a hopeless
// message (one refused message in a consumer's queue) none, nor a long transaction: the
// relays must keep to the bound while a foreign snapshot is held.
func Strikes(f Fault, service string) bool {
	switch f.Kind {
	case FaultProviderFail, FaultProviderAmbiguous, FaultDuplicate, FaultPoison, FaultHopeless, FaultLongTransaction:
		return false
	case FaultKill, FaultFailpoint, FaultResetPeer, FaultTimeout, FaultLatency, FaultLinkDown:
		return f.Target == service || strings.HasPrefix(f.Target, service+"-")
	}
	return true
}

// excluded is one stretch in which the bound does not apply to a service: a fault that
// strikes its relay, from its start to its end plus the grace, or to its backlog's drain
// if that is later.
type excluded struct{ from, to time.Time }

// checkLiveness is invariant 12: between faults, no claimable outbox row waits longer
// than the bound while a relay of its service reports ready; and after each fault the
// backlog drains (within DrainLimit). A row's wait is counted from the latest of when it
// became claimable, the end of the last stretch excluded for its service (a fault that
// strikes its relay, to its end plus the grace or its backlog's drain), the last sample
// in which none of its service's relays was ready, and the last sample taken before
// the row was committed (notCommittedAt). Rows deferred by a refusing queue
// (available_at in the future) and rows under a live claim are not claimable.
func checkLiveness(s Snapshot) Verdict {
	b := newVerdict(12, "liveness: a claimable outbox row is published within the bound between faults, and each fault's backlog drains")
	l := s.Liveness
	if l == nil {
		b.note("not sampled")
		return b.done()
	}
	faults := s.Faults
	recs := map[int]FaultRecovery{}
	for _, r := range Recoveries(l, faults) {
		recs[r.ID] = r
	}
	bySvc := samplesByService(l.Samples)
	var last time.Time
	for _, ss := range bySvc {
		if n := len(ss); n > 0 && ss[n-1].At.After(last) {
			last = ss[n-1].At
		}
	}
	// One backlog that never drains is every later fault's too: the first fault names it.
	var stuck []Fault
	for _, f := range faults {
		if r, ok := recs[f.ID]; ok && r.Drained < 0 && last.Sub(f.End) >= DrainLimit {
			stuck = append(stuck, f)
		}
	}
	slices.SortFunc(stuck, func(a, b Fault) int { return a.End.Compare(b.End) })
	if len(stuck) > 0 {
		f := stuck[0]
		b.fail(NotRecovered, fmt.Sprintf("%s %d (%s)", f.Kind, f.ID, f.Target), "%d rows pending at its end at %s, some still pending %v later (and at the end of %d later faults)",
			recs[f.ID].Backlog, f.End.Format("15:04:05.000"), last.Sub(f.End).Round(time.Second), len(stuck)-1)
	}
	longest := time.Duration(0)
	var longestAt string
	reported := map[string]bool{}
	for _, svc := range mapsKeys(bySvc) {
		var windows []excluded
		for _, f := range faults {
			if f.Start.IsZero() || !Strikes(f, svc) {
				continue
			}
			end := f.End
			if end.IsZero() {
				end = last // still going when the sampling ended
			}
			to := end.Add(l.Grace)
			if r, ok := recs[f.ID]; ok {
				if r.Drained < 0 {
					to = last
				} else if d := end.Add(r.Drained); d.After(to) {
					to = d
				}
			}
			windows = append(windows, excluded{f.Start, to})
		}
		var notReady time.Time // the last sample with no relay of svc ready
		var stalled time.Time  // the first sample of the current stall under a snapshot
		samples := bySvc[svc]
		for i, smp := range samples {
			if smp.Ready == 0 {
				notReady = smp.At
				if stalledUnderSnapshot(faults, windows, smp) {
					stalled = cmp.Or(stalled, smp.At)
					if smp.At.Sub(stalled) > l.Bound && !reported["stall "+svc] {
						reported["stall "+svc] = true
						b.fail(StalledUnderSnapshot, svc,
							"no relay of %s ready from %s to %s while %d claimable rows waited under a long transaction, and no fault struck its relay: a held snapshot must cost its claims time, never stop them (bound %v)",
							svc, stalled.Format("15:04:05.000"), smp.At.Format("15:04:05.000"), smp.Claimable, l.Bound)
					}
				} else {
					stalled = time.Time{}
				}
				continue
			}
			stalled = time.Time{}
			clear, inside := clearSince(windows, smp.At)
			if inside {
				continue
			}
			clear = latest(clear, notReady)
			b.v.Checked++
			for _, w := range smp.Waiting {
				from := latest(latest(w.Since, clear), notCommittedAt(samples[:i], w))
				wait := smp.At.Sub(from)
				if wait > longest {
					longest, longestAt = wait, fmt.Sprintf("%s %s (%s) at %s", svc, w.EventID, w.Type, smp.At.Format("15:04:05.000"))
				}
				if wait <= l.Bound || reported[w.EventID] {
					continue
				}
				reported[w.EventID] = true
				b.fail(ClaimableWaited, fmt.Sprintf("%s %s (%s)", svc, w.EventID, w.Type),
					"claimable since %s, still pending at %s: %v with %d of %d relays ready and no fault striking %s's relay since %s (bound %v)",
					w.Since.Format("15:04:05.000"), smp.At.Format("15:04:05.000"), wait.Round(time.Millisecond), smp.Ready, smp.Relays, svc, from.Format("15:04:05.000"), l.Bound)
			}
		}
	}
	seen := fmt.Sprintf("no claimable row had waited %v (half the bound) in them", l.Bound/2)
	if longestAt != "" {
		seen = fmt.Sprintf("the longest wait in them: %v, %s", longest.Round(time.Millisecond), longestAt)
	}
	b.note("%d samples of a ready relay between faults (bound %v, grace %v after a fault's end or its backlog's drain); %s",
		b.v.Checked, l.Bound, l.Grace, seen)
	b.v.Checked += len(recs) // and each fault's recovery
	return b.done()
}

// notCommittedAt returns the time of the last of a service's earlier samples that was
// taken before row w was committed, zero if none was. w.Since is at least the row's
// created_at, and a committed pending row holds the outbox's oldest pending created_at
// at or below its own; so a sample after w.Since that did not list w and read no
// pending row, or an oldest pending row younger than w.Since, did not see w: its
// transaction, started at created_at, had not committed yet, and no relay could have
// claimed it.
func notCommittedAt(earlier []LivenessSample, w WaitingRow) time.Time {
	for j := len(earlier) - 1; j >= 0 && !earlier[j].At.Before(w.Since); j-- {
		s := earlier[j]
		if s.Error != "" || slices.ContainsFunc(s.Waiting, func(o WaitingRow) bool { return o.EventID == w.EventID }) {
			continue
		}
		if s.Backlog == 0 || s.OldestPending.After(w.Since) {
			return s.At
		}
	}
	return time.Time{}
}

// clearSince returns the latest end of the windows that began before t, and whether t
// is inside one of them.
// stalledUnderSnapshot reports whether smp, a sample with no relay ready, shows a stall
// the relays' readiness cannot excuse: claimable rows waiting while a long transaction
// holds its snapshot and no fault strikes the service's relay (the snapshot must slow
// the claims, not stop them).
func stalledUnderSnapshot(faults []Fault, windows []excluded, smp LivenessSample) bool {
	if len(smp.Waiting) == 0 {
		return false
	}
	if _, inside := clearSince(windows, smp.At); inside {
		return false
	}
	for _, f := range faults {
		if f.Kind == FaultLongTransaction && !f.Start.IsZero() && !smp.At.Before(f.Start) && (f.End.IsZero() || !smp.At.After(f.End)) {
			return true
		}
	}
	return false
}

func clearSince(windows []excluded, t time.Time) (time.Time, bool) {
	var clear time.Time
	for _, w := range windows {
		if w.from.After(t) {
			continue
		}
		if w.to.After(t) {
			return time.Time{}, true
		}
		clear = latest(clear, w.to)
	}
	return clear, false
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
