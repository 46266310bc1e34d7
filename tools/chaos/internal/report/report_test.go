package report

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// smallResult is a run of three buckets with a kill that hit, a poison message and a
// failpoint that missed.
func smallResult(dir string) *Result {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	r := &Result{Design: "outbox + inbox", ReportDir: dir, Started: start, LoadStart: start, LoadEnd: at(2), Finished: at(3), Passed: true}
	r.Series = []Point{
		{T: 0, Sent: 20, OK: 19, P50: 30 * time.Millisecond, P99: 90 * time.Millisecond},
		{T: 1, Sent: 21, OK: 20, Decided: 18, Emailed: 17},
		{T: 2, Decided: 3},
	}
	r.Faults = []check.Fault{
		{ID: 0, Kind: check.FaultKill, Target: "ordering", At: time.Second, Start: at(1), End: at(1.5), Fired: true},
		{ID: 1, Kind: check.FaultPoison, Target: "inventory.order-placed", Detail: "not-json", Start: at(1.2), End: at(1.2), Fired: true},
		{ID: 2, Kind: check.FaultFailpoint, Target: "inventory-1", Start: at(0.5), End: at(1.9)},
		{ID: 3, Kind: check.FaultKill, Target: "notification"}, // never started
	}
	r.FaultCounts = CountFaults(r.Faults)
	r.Verdicts = check.Check(check.Snapshot{})
	return r
}

// The report writes the run's data as JSON and CSV beside report.html, and the page
// carries the same data for its charts, and the script that draws them.
func TestTheReportWritesItsDataAndDrawsItsChartsFromIt(t *testing.T) {
	dir := t.TempDir()
	r := smallResult(dir)
	if err := Write(r, check.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.json", "snapshot.json", "summary.txt", "series.csv", "faults.csv", "report.html"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	rows := readCSV(t, filepath.Join(dir, "series.csv"))
	if len(rows) != 1+len(r.Series) || rows[0][0] != "t_s" || rows[2][2] != "20" || rows[1][6] != "30" || rows[3][6] != "" {
		t.Errorf("series.csv: %q", rows)
	}
	rows = readCSV(t, filepath.Join(dir, "faults.csv"))
	if len(rows) != 1+len(r.Faults) || rows[1][1] != check.FaultKill || rows[1][6] != "1.000" || rows[4][6] != "" {
		t.Errorf("faults.csv: %q", rows)
	}

	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"chart-throughput", "chart-latency", "chart-faults"} {
		if !strings.Contains(string(page), `id="`+id+`"`) {
			t.Errorf("report.html has no place for %s", id)
		}
	}
	if !strings.Contains(string(page), "function lineChart") || strings.Contains(string(page), "<svg") {
		t.Error("report.html should draw its charts with the script, not carry SVG")
	}
	m := regexp.MustCompile(`(?s)<script id="chart-data" type="application/json">(.*?)</script>`).FindSubmatch(page)
	if m == nil {
		t.Fatal("report.html embeds no chart data")
	}
	var data chartData
	if err := json.Unmarshal(m[1], &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Charts) != 2 || len(data.XS) != 3 || data.LoadEnd != 2 {
		t.Errorf("chart data: %+v", data)
	}
	if p50 := data.Charts[1].Lines[0].YS; p50[0] == nil || *p50[0] != 30 || p50[1] != nil {
		t.Errorf("client p50 %v: want 30 ms, then no value", p50)
	}
	// The kill and the failpoint's window shade the charts; the poison is instantaneous.
	if len(data.Shades) != 1 || data.Shades[0].Category != "process" {
		t.Errorf("shades %+v: want the kill's window alone (the failpoint missed)", data.Shades)
	}
	if len(data.Timeline.Kinds) != 3 || len(data.Timeline.Marks) != 3 {
		t.Errorf("timeline %+v: three kinds, three faults that started", data.Timeline)
	}

	// report DIR renders the same page from report.json.
	if err := Rerender(dir); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(page) {
		t.Error("report.html rendered again from report.json differs")
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
