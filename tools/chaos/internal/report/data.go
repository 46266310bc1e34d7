package report

import (
	"encoding/csv"
	"os"
	"strconv"
	"time"
)

// seriesRows is the run's time buckets as CSV rows, a header first: what the throughput
// and latency charts draw. Latencies are in milliseconds, empty when a bucket has none.
func seriesRows(r *Result) [][]string {
	rows := [][]string{{"t_s", "sent_per_s", "ok_per_s", "decided_per_s", "emailed_per_s", "shed_per_s",
		"client_p50_ms", "client_p99_ms", "post_p99_ms", "e2e_p50_ms", "e2e_p99_ms"}}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	msec := func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return num(float64(d) / float64(time.Millisecond))
	}
	for _, p := range r.Series {
		rows = append(rows, []string{num(p.T), num(p.Sent), num(p.OK), num(p.Decided), num(p.Emailed), num(p.Shed),
			msec(p.P50), msec(p.P99), msec(p.PostP99), msec(p.E2EP50), msec(p.E2EP99)})
	}
	return rows
}

// faultRows is every scheduled fault as CSV rows, a header first: what the fault
// timeline draws. Times are seconds from the load's start, empty for a fault that never
// started.
func faultRows(r *Result) [][]string {
	rows := [][]string{{"id", "kind", "target", "detail", "at_s", "duration_s", "start_s", "end_s", "fired", "note", "check_violation"}}
	sec := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatFloat(t.Sub(r.LoadStart).Seconds(), 'f', 3, 64)
	}
	for _, f := range r.Faults {
		violation := ""
		if f.Check != nil {
			violation = f.Check.Violation
		}
		rows = append(rows, []string{strconv.Itoa(f.ID), f.Kind, f.Target, f.Detail,
			strconv.FormatFloat(f.At.Seconds(), 'f', 3, 64), strconv.FormatFloat(f.Duration.Seconds(), 'f', 3, 64),
			sec(f.Start), sec(f.End), strconv.FormatBool(f.Fired), f.Note, violation})
	}
	return rows
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
