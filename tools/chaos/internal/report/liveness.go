package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// livenessRowsShown bounds the per-fault table of the summary; report.json has every
// fault's recovery.
const livenessRowsShown = 40

// LivenessRow is one fault kind's outbox recovery over the run: how many faults ended
// with a backlog, and the median and maximum time from their end to a publication again
// and to the drain of what was written before it.
type LivenessRow struct {
	Kind                       string
	N, Backlog                 int
	PublishedP50, PublishedMax time.Duration // -1 in a maximum: one never
	DrainedP50, DrainedMax     time.Duration
}

// LivenessRows sums up the recoveries by kind, in report order; faults that ended with no
// backlog count in N only.
func LivenessRows(recs []check.FaultRecovery) []LivenessRow {
	byKind := map[string][]check.FaultRecovery{}
	for _, r := range recs {
		byKind[r.Kind] = append(byKind[r.Kind], r)
	}
	kindOrder := append(append(slices.Clone(check.FaultKinds), check.FaultBrokerRestart), check.ClusterKinds...)
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Compare(slices.Index(kindOrder, a), slices.Index(kindOrder, b)) })
	var rows []LivenessRow
	for _, k := range kinds {
		row := LivenessRow{Kind: k, N: len(byKind[k])}
		var pub, drained []time.Duration
		for _, r := range byKind[k] {
			if r.Backlog > 0 {
				pub, drained = append(pub, r.Published), append(drained, r.Drained)
			}
		}
		if row.Backlog = len(pub); row.Backlog > 0 {
			row.PublishedP50, row.PublishedMax = medianMax(pub)
			row.DrainedP50, row.DrainedMax = medianMax(drained)
		}
		rows = append(rows, row)
	}
	return rows
}

// PrintLivenessTable writes invariant 12's figures: per fault kind, as a markdown table,
// then one row per fault that ended with a backlog, the slowest first. Nothing for a run
// without liveness samples (a report written before them).
func PrintLivenessTable(w io.Writer, r *Result) {
	if len(r.OutboxRecovery) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Outbox recovery after each fault (from its end; median / max; the bound of %v on a claimable row's wait applies from %v after the end or the drain, whichever is later):\n",
		r.Config.LivenessBound, r.Config.LivenessGrace)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| kind | faults | with a backlog at the end | published again | backlog drained |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, row := range LivenessRows(r.OutboxRecovery) {
		if row.Backlog == 0 {
			fmt.Fprintf(w, "| `%s` | %d | 0 | | |\n", row.Kind, row.N)
			continue
		}
		fmt.Fprintf(w, "| `%s` | %d | %d | %s / %s | %s / %s |\n", row.Kind, row.N, row.Backlog,
			dur(row.PublishedP50), dur(row.PublishedMax), dur(row.DrainedP50), dur(row.DrainedMax))
	}
	var slow []check.FaultRecovery
	for _, rec := range r.OutboxRecovery {
		if rec.Backlog > 0 {
			slow = append(slow, rec)
		}
	}
	if len(slow) == 0 {
		return
	}
	slices.SortStableFunc(slow, func(a, b check.FaultRecovery) int {
		return cmp.Compare(neverLast(b.Drained), neverLast(a.Drained))
	})
	fmt.Fprintln(w)
	if len(slow) > livenessRowsShown {
		fmt.Fprintf(w, "The %d slowest of %d faults that ended with a backlog (report.json has each):\n\n", livenessRowsShown, len(slow))
		slow = slow[:livenessRowsShown]
	}
	fmt.Fprintln(w, "| fault | kind | target | ended at | backlog (rows) | published again | drained |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, rec := range slow {
		fmt.Fprintf(w, "| %d | `%s` | %s | %.1fs | %d | %s | %s |\n", rec.ID, rec.Kind, rec.Target, rec.End.Sub(r.LoadStart).Seconds(), rec.Backlog, dur(rec.Published), dur(rec.Drained))
	}
}

// neverLast orders "never" (-1) after every time.
func neverLast(d time.Duration) time.Duration {
	if d < 0 {
		return time.Duration(1<<63 - 1)
	}
	return d
}
