package report

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// chartScript draws the report's charts in the page from the data chartData embeds
// (charts.js): no plotting code in Go, and the same data is in series.csv and faults.csv.
//
//go:embed charts.js
var chartScript string

// chartData is what charts.js draws: the run's series as lines, the lasting faults as
// shaded bands, every fault on a timeline.
type chartData struct {
	XS         []float64  `json:"xs"`       // seconds since the load started, one per bucket
	XMax       float64    `json:"xmax"`     // the x axis's end
	LoadEnd    float64    `json:"load_end"` // seconds; the dashed line
	Charts     []chart    `json:"charts"`
	Shades     []window   `json:"shades"`
	Categories []category `json:"categories"`
	Timeline   timeline   `json:"timeline"`
}

// chart is one line chart; a nil y is a bucket without a value.
type chart struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Unit  string `json:"unit"`
	Log   bool   `json:"log"`
	Lines []line `json:"lines"`
}

type line struct {
	Name  string     `json:"name"`
	Color string     `json:"color"`
	YS    []*float64 `json:"ys"`
}

// window is a lasting fault that hit, as a band of its category.
type window struct {
	From     float64 `json:"from"` // seconds from the load's start
	To       float64 `json:"to"`
	Category string  `json:"category"`
}

type category struct {
	Name    string  `json:"name"`
	Color   string  `json:"color"`
	Label   string  `json:"label"`
	Opacity float64 `json:"opacity"`
}

// timeline is one lane per fault kind, one mark per fault that started.
type timeline struct {
	Kinds  []string `json:"kinds"`
	Colors []string `json:"colors"` // by lane
	Marks  []mark   `json:"marks"`
}

type mark struct {
	Lane  int     `json:"lane"`
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Fired bool    `json:"fired"` // hollow when scheduled but missed
	Title string  `json:"title"`
}

var kindColors = map[string]string{
	check.FaultKill: "#d62728", check.FaultFailpoint: "#9467bd", check.FaultResetPeer: "#ff7f0e", check.FaultTimeout: "#8c564b",
	check.FaultLatency: "#bcbd22", check.FaultLinkDown: "#e377c2", check.FaultProviderFail: "#17becf", check.FaultProviderAmbiguous: "#1f77b4",
	check.FaultDuplicate: "#2ca02c", check.FaultPoison: "#7f7f7f", check.FaultBrokerRestart: "#000000",
	check.FaultBrokerOutage: "#393b79", check.FaultPostgresOutage: "#637939",
}

// Categories of lasting faults, for shading: a process down or restarting, a link
// faulty, the provider faulty. Outages never overlap each other, so theirs are darker.
var (
	faultCategory = map[string]string{
		check.FaultKill: "process", check.FaultFailpoint: "process", check.FaultBrokerRestart: "process",
		check.FaultResetPeer: "network", check.FaultTimeout: "network", check.FaultLatency: "network", check.FaultLinkDown: "network",
		check.FaultBrokerOutage: "outage", check.FaultPostgresOutage: "outage",
		check.FaultProviderFail: "provider", check.FaultProviderAmbiguous: "provider",
	}
	categories = []category{
		{"process", "#d62728", "process crash windows", 0.07},
		{"network", "#ff7f0e", "network fault windows", 0.07},
		{"outage", "#393b79", "broker, Postgres outages", 0.3},
		{"provider", "#1f77b4", "provider fault windows", 0.07},
	}
)

// newChartData prepares throughput, latency and the fault timeline of a run.
func newChartData(r *Result) chartData {
	xs := make([]float64, len(r.Series))
	for i, p := range r.Series {
		xs[i] = p.T
	}
	col := func(f func(Point) float64) []*float64 {
		out := make([]*float64, len(r.Series))
		for i, p := range r.Series {
			if v := f(p); !math.IsNaN(v) {
				out[i] = &v
			}
		}
		return out
	}
	msOrNaN := func(d time.Duration) float64 {
		if d <= 0 {
			return math.NaN()
		}
		return float64(d) / float64(time.Millisecond)
	}
	xmax := 1.0
	if len(xs) > 0 {
		xmax = xs[len(xs)-1] + (xs[len(xs)-1]-xs[0])/float64(max(1, len(xs)-1))
	}
	return chartData{
		XS: xs, XMax: xmax, LoadEnd: r.LoadEnd.Sub(r.LoadStart).Seconds(),
		Charts: []chart{
			{ID: "throughput", Title: "Throughput: orders per second", Unit: "orders/s", Lines: []line{
				{"sent", "#999999", col(func(p Point) float64 { return p.Sent })},
				{"answered ok", "#1f77b4", col(func(p Point) float64 { return p.OK })},
				{"decided", "#2ca02c", col(func(p Point) float64 { return p.Decided })},
				{"emailed", "#9467bd", col(func(p Point) float64 { return p.Emailed })},
				{"shed (503)", "#d62728", col(func(p Point) float64 { return p.Shed })},
			}},
			{ID: "latency", Title: "Latency (log scale)", Unit: "ms", Log: true, Lines: []line{
				{"client p50", "#1f77b4", col(func(p Point) float64 { return msOrNaN(p.P50) })},
				{"client p99", "#aec7e8", col(func(p Point) float64 { return msOrNaN(p.P99) })},
				{"accepted POST p99", "#ff7f0e", col(func(p Point) float64 { return msOrNaN(p.PostP99) })},
				{"placed→decided p50", "#2ca02c", col(func(p Point) float64 { return msOrNaN(p.E2EP50) })},
				{"placed→decided p99", "#98df8a", col(func(p Point) float64 { return msOrNaN(p.E2EP99) })},
			}},
		},
		Shades:     faultWindows(r),
		Categories: categories,
		Timeline:   newTimeline(r),
	}
}

// faultWindows are the windows of the faults that last (not the instantaneous
// duplicates and poison), by what they disturb: processes, the network or the provider.
func faultWindows(r *Result) []window {
	var ws []window
	for _, f := range r.Faults {
		if f.Start.IsZero() || f.End.IsZero() || !f.Fired {
			continue
		}
		cat, ok := faultCategory[f.Kind]
		if !ok {
			continue
		}
		from, to := f.Start.Sub(r.LoadStart).Seconds(), f.End.Sub(r.LoadStart).Seconds()
		ws = append(ws, window{from, max(to, from+0.3), cat})
	}
	slices.SortFunc(ws, func(a, b window) int { return cmp.Compare(a.From, b.From) })
	return ws
}

// newTimeline puts every fault that started in its kind's lane: its window, or a tick
// for an instantaneous one (a duplicate, a poison message).
func newTimeline(r *Result) timeline {
	var t timeline
	lane := map[string]int{}
	for i, c := range r.FaultCounts {
		t.Kinds = append(t.Kinds, c.Kind)
		t.Colors = append(t.Colors, cmp.Or(kindColors[c.Kind], "#333"))
		lane[c.Kind] = i
	}
	for _, f := range r.Faults {
		i, ok := lane[f.Kind]
		if !ok || f.Start.IsZero() {
			continue
		}
		t.Marks = append(t.Marks, mark{
			Lane: i, From: f.Start.Sub(r.LoadStart).Seconds(), To: f.End.Sub(r.LoadStart).Seconds(), Fired: f.Fired,
			Title: strings.TrimSpace(fmt.Sprintf("%s %s %s %s", f.Kind, f.Target, f.Detail, f.Note)),
		})
	}
	return t
}

// chartsHTML is the charts' section of report.html: a place for each chart, the data as
// JSON and the script that draws them.
func chartsHTML(r *Result) (string, error) {
	data, err := json.Marshal(newChartData(r))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range []struct{ id, title, file string }{
		{"throughput", "Throughput (per second)", "series.csv"},
		{"latency", "Latency", "series.csv"},
		{"faults", "Fault timeline", "faults.csv"},
	} {
		fmt.Fprintf(&b, `<figure><div class="chart" id="chart-%s"></div><figcaption>%s (<a href="%s">%s</a>)</figcaption></figure>`, c.id, c.title, c.file, c.file)
	}
	// JSON in a script element: "</" must not end it early.
	fmt.Fprintf(&b, "<script id=\"chart-data\" type=\"application/json\">%s</script>\n<script>\n%s</script>",
		strings.ReplaceAll(string(data), "</", `<\/`), chartScript)
	return b.String(), nil
}
