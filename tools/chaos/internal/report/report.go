// Package report turns a run into its reports: the summary printed at the end,
// report.json, snapshot.json, the series and faults as CSV, and report.html with its
// charts drawn in the page from the embedded data.
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// percentile returns the p-th percentile (0..1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// OpStats sums up the client history.
type OpStats struct {
	Sent      int           `json:"sent"`
	OK        int           `json:"ok"`
	Failed    int           `json:"failed"`
	Unknown   int           `json:"unknown"`
	Retried   int           `json:"retried"` // operations that needed more than one attempt
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	PerSecond float64       `json:"ok_per_second"`
}

// OrderStats sums up the orders the system holds at the end.
type OrderStats struct {
	Total     int           `json:"total"`
	Confirmed int           `json:"confirmed"`
	Rejected  int           `json:"rejected"`
	Cancelled int           `json:"cancelled"`
	Pending   int           `json:"pending"`
	E2EP50    time.Duration `json:"e2e_p50_ns"` // placed to decided
	E2EP99    time.Duration `json:"e2e_p99_ns"`
}

// FaultCount is how many faults of one kind were scheduled, started and really hit.
type FaultCount struct {
	Kind      string `json:"kind"`
	Scheduled int    `json:"scheduled"`
	Started   int    `json:"started"`
	Fired     int    `json:"fired"`
}

// Point is one time bucket of the run, from the start of the load.
type Point struct {
	T       float64       `json:"t_s"`
	Sent    float64       `json:"sent_per_s"`
	OK      float64       `json:"ok_per_s"`
	Decided float64       `json:"decided_per_s"` // orders confirmed or rejected in the bucket
	Emailed float64       `json:"emailed_per_s"` // emails the provider accepted in the bucket
	Shed    float64       `json:"shed_per_s"`    // POST attempts answered 503 with Retry-After in the bucket
	PostP99 time.Duration `json:"post_p99_ns"`   // accepted POST attempts sent in the bucket
	P50     time.Duration `json:"p50_ns"`        // client latency of operations started in the bucket
	P99     time.Duration `json:"p99_ns"`
	E2EP50  time.Duration `json:"e2e_p50_ns"` // placed to decided, by placing time
	E2EP99  time.Duration `json:"e2e_p99_ns"`
}

// SummarizeOps sums up the client history: outcomes, retries, latency, throughput.
func SummarizeOps(h []check.ClientOp) OpStats {
	s := OpStats{Sent: len(h)}
	var lat []time.Duration
	var first, last time.Time
	for _, op := range h {
		switch op.Outcome {
		case check.OutcomeOK:
			s.OK++
			lat = append(lat, op.Latency)
			if first.IsZero() || op.Start.Before(first) {
				first = op.Start
			}
			if op.End.After(last) {
				last = op.End
			}
		case check.OutcomeFailed:
			s.Failed++
		default:
			s.Unknown++
		}
		if op.Attempts > 1 {
			s.Retried++
		}
	}
	slices.Sort(lat)
	s.P50, s.P99 = percentile(lat, 0.5), percentile(lat, 0.99)
	if len(lat) > 0 {
		s.Max = lat[len(lat)-1]
	}
	if d := last.Sub(first).Seconds(); d > 0 {
		s.PerSecond = float64(s.OK) / d
	}
	return s
}

// SummarizeOrders counts the orders by status, with placed-to-decided latency.
func SummarizeOrders(orders []check.Order) OrderStats {
	var s OrderStats
	var e2e []time.Duration
	for _, o := range orders {
		s.Total++
		switch o.Status {
		case check.StatusConfirmed:
			s.Confirmed++
		case check.StatusRejected:
			s.Rejected++
		case check.StatusCancelled:
			s.Cancelled++
			continue // its updated_at is the cancellation's, not the decision's
		default:
			s.Pending++
			continue
		}
		e2e = append(e2e, o.UpdatedAt.Sub(o.CreatedAt))
	}
	slices.Sort(e2e)
	s.E2EP50, s.E2EP99 = percentile(e2e, 0.5), percentile(e2e, 0.99)
	return s
}

// CountFaults counts the faults of each kind scheduled, started and hit, in report order.
func CountFaults(fs []check.Fault) []FaultCount {
	byKind := map[string]*FaultCount{}
	var order []string
	for _, f := range fs {
		c, ok := byKind[f.Kind]
		if !ok {
			c = &FaultCount{Kind: f.Kind}
			byKind[f.Kind] = c
			order = append(order, f.Kind)
		}
		c.Scheduled++
		if !f.Start.IsZero() {
			c.Started++
		}
		if f.Fired {
			c.Fired++
		}
	}
	kindOrder := append(append(slices.Clone(check.FaultKinds), check.FaultBrokerRestart), check.ClusterKinds...)
	slices.SortFunc(order, func(a, b string) int { return cmp.Compare(slices.Index(kindOrder, a), slices.Index(kindOrder, b)) })
	out := make([]FaultCount, len(order))
	for i, k := range order {
		out[i] = *byKind[k]
	}
	return out
}

// bucketSize gives about 120 buckets over the load, at least one second each.
func bucketSize(d time.Duration) time.Duration {
	return max(time.Second, (d / 120).Round(time.Second))
}

// Series buckets the run from the start of the load to the last outcome or email:
// rates, latencies and placed-to-decided times per bucket.
func Series(start, end time.Time, h []check.ClientOp, orders []check.Order, emails []check.SentEmail) []Point {
	size := bucketSize(end.Sub(start))
	n := int(end.Sub(start)/size) + 1
	// Outcomes keep arriving after the load while the system catches up; show that tail.
	for _, o := range orders {
		if o.Status != check.StatusPending {
			n = max(n, int(o.UpdatedAt.Sub(start)/size)+1)
		}
	}
	for _, e := range emails {
		if !e.CreatedAt.IsZero() {
			n = max(n, int(e.CreatedAt.Sub(start)/size)+1)
		}
	}
	n = min(n, 10_000)
	pts := make([]Point, n)
	lat := make([][]time.Duration, n)
	e2e := make([][]time.Duration, n)
	bucket := func(t time.Time) int {
		i := int(t.Sub(start) / size)
		if i < 0 || i >= n {
			return -1
		}
		return i
	}
	per := size.Seconds()
	for _, op := range h {
		if i := bucket(op.Start); i >= 0 {
			pts[i].Sent += 1 / per
			if op.Outcome == check.OutcomeOK {
				lat[i] = append(lat[i], op.Latency)
			}
		}
		if op.Outcome == check.OutcomeOK {
			if i := bucket(op.End); i >= 0 {
				pts[i].OK += 1 / per
			}
		}
	}
	post := make([][]time.Duration, n)
	for _, op := range h {
		for _, t := range op.Tries {
			i := bucket(t.At)
			if i < 0 {
				continue
			}
			switch {
			case t.Status == http.StatusCreated || t.Status == http.StatusOK:
				post[i] = append(post[i], t.Took)
			case t.Status == http.StatusServiceUnavailable && t.RetryAfter:
				pts[i].Shed += 1 / per
			}
		}
	}
	for _, e := range emails {
		if i := bucket(e.CreatedAt); i >= 0 {
			pts[i].Emailed += 1 / per
		}
	}
	for _, o := range orders {
		if o.Status == check.StatusPending {
			continue
		}
		if i := bucket(o.UpdatedAt); i >= 0 {
			pts[i].Decided += 1 / per
		}
		if i := bucket(o.CreatedAt); i >= 0 {
			e2e[i] = append(e2e[i], o.UpdatedAt.Sub(o.CreatedAt))
		}
	}
	for i := range pts {
		pts[i].T = float64(i) * per
		slices.Sort(lat[i])
		slices.Sort(e2e[i])
		pts[i].P50, pts[i].P99 = percentile(lat[i], 0.5), percentile(lat[i], 0.99)
		pts[i].E2EP50, pts[i].E2EP99 = percentile(e2e[i], 0.5), percentile(e2e[i], 0.99)
		slices.Sort(post[i])
		pts[i].PostP99 = percentile(post[i], 0.99)
	}
	return pts
}

// PrintSummary writes the run's summary table.
func PrintSummary(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n%s — %s\n", r.Design, map[bool]string{true: "PASSED", false: "FAILED"}[r.Passed])
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "operations\t%d sent, %d ok, %d unknown, %d failed (%d of them shed: 503 + Retry-After), %d retried\n", r.Ops.Sent, r.Ops.OK, r.Ops.Unknown, r.Ops.Failed, r.Posts.Rejected, r.Ops.Retried)
	fmt.Fprintf(tw, "orders\t%d: %d confirmed, %d rejected, %d cancelled, %d pending\n", r.Orders.Total, r.Orders.Confirmed, r.Orders.Rejected, r.Orders.Cancelled, r.Orders.Pending)
	fmt.Fprintf(tw, "throughput\t%.1f orders/s accepted (offered %g/s), load %v\n", r.Ops.PerSecond, r.Config.Rate, r.LoadEnd.Sub(r.LoadStart).Round(time.Second))
	fmt.Fprintf(tw, "client latency\tp50 %v  p99 %v  max %v\n", ms(r.Ops.P50), ms(r.Ops.P99), ms(r.Ops.Max))
	fmt.Fprintf(tw, "placed → decided\tp50 %v  p99 %v\n", ms(r.Orders.E2EP50), ms(r.Orders.E2EP99))
	fmt.Fprintf(tw, "quiet\t%s (%v)\n", r.Quiet.Reason, r.Quiet.Waited.Round(time.Second))
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tSCHEDULED\tSTARTED\tHIT")
	for _, c := range r.FaultCounts {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", c.Kind, c.Scheduled, c.Started, c.Fired)
	}
	tw.Flush()

	printOutages(w, r)
	printPosts(w, r)
	printHeavyFaults(w, r)
	PrintRecoveryTable(w, r.Faults)
	PrintLivenessTable(w, r)

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tVERDICT\tCHECKED\tVIOLATIONS")
	for _, v := range r.Verdicts {
		verdict, detail := "ok", ""
		if !v.Passed {
			verdict = "VIOLATED"
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(v.Counts)) {
				parts = append(parts, fmt.Sprintf("%d %s", v.Counts[k], k))
			}
			detail = strings.Join(parts, "; ")
		}
		fmt.Fprintf(tw, "%d. %s\t%s\t%d\t%s\n", v.Invariant, v.Title, verdict, v.Checked, detail)
	}
	tw.Flush()
	for _, v := range r.Verdicts {
		for _, n := range v.Notes {
			fmt.Fprintf(w, "  (%d) %s\n", v.Invariant, n)
		}
		for _, e := range v.Examples {
			fmt.Fprintf(w, "  (%d) %s: %s: %s\n", v.Invariant, e.Kind, e.Subject, e.Detail)
		}
	}
	PrintSoak(w, r.Soak)
	fmt.Fprintf(w, "\nreport: %s\n", filepath.Join(r.ReportDir, "report.html"))
}

// printOutages writes the budgets the run shrank and every outage set against the one it
// had to outlast.
func printOutages(w io.Writer, r *Result) {
	if len(r.Budgets) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUDGET\tHELD BY\tSIZE\tSET AGAINST\tLONGEST OUTAGE IT SURVIVED BEFORE")
	for _, b := range r.Budgets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", b.Name, b.Who, b.Spends, b.Kind, ms(b.Max))
	}
	tw.Flush()
	for _, n := range r.Config.BudgetNotes() {
		for _, line := range wrap(n, 88) {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTAGE\tAT\tLENGTH\tBUDGET\tOUTLASTED\tBY")
	for _, o := range r.Outages {
		verdict, by := "yes", fmt.Sprintf("%.1fs", (o.Length-o.BudgetMax).Seconds())
		switch {
		case !o.Hit:
			verdict, by = "not hit", ""
		case !o.Outlasted && !o.Required:
			verdict, by = "no", "(not shrunk)"
		case !o.Outlasted:
			verdict = "NO"
		}
		fmt.Fprintf(tw, "%s\t%.1fs\t%.1fs\t%s %.1fs\t%s\t%s\n", o.Kind, o.At.Seconds(), o.Length.Seconds(), o.Budget, o.BudgetMax.Seconds(), verdict, by)
	}
	tw.Flush()
}

// wrap breaks text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, word := range strings.Fields(text) {
		if cur.Len() > 0 && cur.Len()+1+len(word) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(word)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

func ms(d time.Duration) time.Duration {
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// Write writes report.json, snapshot.json (the checker's whole input), summary.txt,
// the run's series and faults as CSV, and report.html with the charts drawn in the page.
func Write(r *Result, snap check.Snapshot) error {
	write := func(name string, v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(r.ReportDir, name), b, 0o644)
	}
	if err := write("report.json", r); err != nil {
		return err
	}
	if err := write("snapshot.json", snap); err != nil {
		return err
	}
	if r.Soak != nil {
		if err := writeSoak(r.ReportDir, r.Soak); err != nil {
			return err
		}
	}
	var sum strings.Builder
	PrintSummary(&sum, r)
	if err := os.WriteFile(filepath.Join(r.ReportDir, "summary.txt"), []byte(sum.String()), 0o644); err != nil {
		return err
	}
	return render(r, sum.String())
}

// Rerender reads a run's report.json and writes its CSV files and report.html again:
// for a report written by an older harness, or after a change to the charts.
func Rerender(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "report.json"), err)
	}
	r.ReportDir = dir
	var sum strings.Builder
	PrintSummary(&sum, &r)
	return render(&r, sum.String())
}

// render writes what report.json determines beside it: series.csv, faults.csv and
// report.html, which ends with summary.
func render(r *Result, summary string) error {
	if err := writeCSV(filepath.Join(r.ReportDir, "series.csv"), seriesRows(r)); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(r.ReportDir, "faults.csv"), faultRows(r)); err != nil {
		return err
	}
	page, err := renderHTML(r, summary)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.ReportDir, "report.html"), []byte(page), 0o644)
}
