package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// What a node loss costs (make chaos-cluster): for each broker node killed or
// stopped and each Postgres failover, how long until orders were accepted again, how long
// until the backlog had drained, and how many requests were refused or timed out
// meanwhile. The drain is polled during the run (faults/cluster.go); the client figures
// are the load's own record of every POST /orders attempt.

// AddClientRecovery fills each cluster fault's client figures from the load's history:
// the first 201 to an attempt sent after the kill, and the 503s and timeouts among the
// attempts sent from the kill until that 201 and, for a failover, the promotion (until
// the end of the load if no 201 came); and the same until the node or the old primary
// was back.
//
// It also fills Emailed from the provider's emails: from the kill to the last outcome
// email of an order placed before the node's return (drains' reckoning for outages).
func AddClientRecovery(faults []check.Fault, history []check.ClientOp, orders []check.Order, emails []check.SentEmail) {
	lastEmail := map[string]time.Time{} // customer address -> its last outcome email
	for _, e := range emails {
		if strings.HasSuffix(e.IdempotencyKey, "/order-cancelled") || e.CreatedAt.IsZero() {
			continue
		}
		if e.CreatedAt.After(lastEmail[e.To]) {
			lastEmail[e.To] = e.CreatedAt
		}
	}
	var tries []check.Try
	for _, op := range history {
		tries = append(tries, op.Tries...)
	}
	slices.SortFunc(tries, func(a, b check.Try) int { return a.At.Compare(b.At) })
	for i := range faults {
		r := faults[i].Recovery
		if r == nil || r.Killed.IsZero() {
			continue
		}
		r.Accepted = -1
		var accepted time.Time
		for _, t := range tries {
			if !t.At.Before(r.Killed) && t.Status == 201 {
				if end := t.At.Add(t.Took); accepted.IsZero() || end.Before(accepted) {
					accepted = end
				}
			}
			if !accepted.IsZero() && t.At.After(accepted) {
				break // later attempts cannot answer sooner than this one
			}
		}
		if !accepted.IsZero() {
			r.Accepted = accepted.Sub(r.Killed)
		}
		r.Emailed = 0
		for _, o := range orders {
			if at, ok := lastEmail[o.CustomerEmail]; ok && !o.CreatedAt.After(r.Restored) && at.After(r.Restored) {
				r.Emailed = max(r.Emailed, at.Sub(r.Killed))
			}
		}
		// The headline window: until orders were accepted again and, for a failover, the
		// standby promoted; the long one: until the node or old primary was back.
		end := r.Promoted
		switch {
		case accepted.IsZero():
			end = time.Unix(1<<40, 0) // never accepted again: every later attempt counts
		case accepted.After(end):
			end = accepted
		}
		r.Refused, r.TimedOut, r.Tries = count(tries, r.Killed, end)
		back := r.Restored
		if back.IsZero() || back.Before(end) {
			back = end
		}
		r.RefusedUntilBack, r.TimedOutUntilBack, r.TriesUntilBack = count(tries, r.Killed, back)
	}
}

// count returns the 503s, the timeouts and all of the attempts sent in [from, to).
func count(tries []check.Try, from, to time.Time) (refused, timedOut, all int) {
	for _, t := range tries {
		if t.At.Before(from) || !t.At.Before(to) {
			continue
		}
		all++
		switch {
		case t.Status == 503:
			refused++
		case t.Timeout:
			timedOut++
		}
	}
	return refused, timedOut, all
}

// RecoveryRow is one kind of cluster fault's figures over the run: median and maximum.
type RecoveryRow struct {
	Kind                     string
	N                        int
	AcceptedP50, AcceptedMax time.Duration // -1 in a maximum: one never
	DrainedP50, DrainedMax   time.Duration
	EmailedP50, EmailedMax   time.Duration
	RefusedP50, RefusedMax   int
	TimedOutP50, TimedOutMax int
}

// RecoveryRows sums up the cluster faults that fired, one row per kind in check.ClusterKinds order.
func RecoveryRows(faults []check.Fault) []RecoveryRow {
	var rows []RecoveryRow
	for _, kind := range check.ClusterKinds {
		var acc, drain, emailed []time.Duration
		var refused, timedOut []int
		for _, f := range faults {
			if f.Kind != kind || f.Recovery == nil || !f.Fired {
				continue
			}
			r := f.Recovery
			acc, drain, emailed = append(acc, r.Accepted), append(drain, r.Drained), append(emailed, r.Emailed)
			refused, timedOut = append(refused, r.Refused), append(timedOut, r.TimedOut)
		}
		if len(acc) == 0 {
			continue
		}
		row := RecoveryRow{Kind: kind, N: len(acc)}
		row.AcceptedP50, row.AcceptedMax = medianMax(acc)
		row.DrainedP50, row.DrainedMax = medianMax(drain)
		row.EmailedP50, row.EmailedMax = medianMax(emailed)
		row.RefusedP50, row.RefusedMax = medianMax(refused)
		row.TimedOutP50, row.TimedOutMax = medianMax(timedOut)
		rows = append(rows, row)
	}
	return rows
}

// medianMax returns the median (the lower middle of an even count) and the maximum; a
// negative value (never reached) counts as the maximum.
func medianMax[T time.Duration | int](xs []T) (T, T) {
	s := slices.Clone(xs)
	never := slices.ContainsFunc(s, func(x T) bool { return x < 0 })
	slices.SortFunc(s, func(a, b T) int {
		switch {
		case a < 0 && b >= 0:
			return 1
		case b < 0 && a >= 0:
			return -1
		}
		return int(a - b)
	})
	mx := s[len(s)-1]
	if never {
		mx = -1
	}
	return s[(len(s)-1)/2], mx
}

// dur is a recovery figure in seconds, "never" for one not reached.
func dur(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// PrintRecoveryTable writes the recovery figures as a markdown table (RecoveryTable),
// then one line per fault.
func PrintRecoveryTable(w io.Writer, faults []check.Fault) {
	if len(RecoveryRows(faults)) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "What a node loss cost (from the kill; median / max; 503s and timeouts: of the POSTs sent until orders were accepted again and, for a failover, the standby promoted):")
	fmt.Fprintln(w)
	RecoveryTable(w, faults)
	printRecoveries(w, faults)
}

// RecoveryTable writes the recovery figures of each kind of cluster fault as a markdown
// table (docs/kubernetes.md quotes it: make chaos-figures, view recovery); nothing for a
// run without cluster faults.
func RecoveryTable(w io.Writer, faults []check.Fault) {
	rows := RecoveryRows(faults)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "| kind | n | orders accepted again | backlog decided and published | backlog emailed | 503s | timeouts |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| `%s` | %d | %s / %s | %s / %s | %s / %s | %d / %d | %d / %d |\n", r.Kind, r.N,
			dur(r.AcceptedP50), dur(r.AcceptedMax), dur(r.DrainedP50), dur(r.DrainedMax), dur(r.EmailedP50), dur(r.EmailedMax),
			r.RefusedP50, r.RefusedMax, r.TimedOutP50, r.TimedOutMax)
	}
}

// printRecoveries writes one line per cluster fault.
func printRecoveries(w io.Writer, faults []check.Fault) {
	fmt.Fprintln(w)
	for _, f := range faults {
		r := f.Recovery
		if r == nil || !check.IsCluster(f.Kind) {
			continue
		}
		what := r.Node
		if r.Queue != "" {
			what += fmt.Sprintf(" (leader of %s, %d messages)", r.Queue, r.Messages)
		}
		back := "never"
		if !r.Restored.IsZero() {
			back = dur(r.Restored.Sub(r.Killed))
		}
		fmt.Fprintf(w, "  #%d %s %s at %.0fs: back after %s, accepted after %s, drained after %s, emailed after %s; %d of %d POSTs 503, %d timed out until accepted; %d of %d 503, %d timed out until back%s\n",
			f.ID, f.Kind, what, f.At.Seconds(), back, dur(r.Accepted), dur(r.Drained), dur(r.Emailed), r.Refused, r.Tries, r.TimedOut,
			r.RefusedUntilBack, r.TriesUntilBack, r.TimedOutUntilBack, noteOf(f))
	}
}

func noteOf(f check.Fault) string {
	if f.Note == "" {
		return ""
	}
	return " (" + f.Note + ")"
}
