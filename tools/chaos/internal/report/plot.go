package report

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// plot is one chart of the report, as a standalone SVG document.
type plot struct {
	file  string
	title string
	svg   string
}

type series1 struct {
	name, color string
	ys          []float64 // NaN: no value in this bucket
}

type window struct {
	from, to float64 // seconds from the load's start
	category string
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH            = 980, 300
	marginL, marginR, marginT = 110, 190, 28
	marginB                   = 40
	plotW, plotH              = chartW - marginL - marginR, chartH - marginT - marginB
)

var kindColors = map[string]string{
	check.FaultKill: "#d62728", check.FaultFailpoint: "#9467bd", check.FaultResetPeer: "#ff7f0e", check.FaultTimeout: "#8c564b",
	check.FaultLatency: "#bcbd22", check.FaultLinkDown: "#e377c2", check.FaultProviderFail: "#17becf", check.FaultProviderAmbiguous: "#1f77b4",
	check.FaultDuplicate: "#2ca02c", check.FaultPoison: "#7f7f7f", check.FaultBrokerRestart: "#000000",
	check.FaultBrokerOutage: "#393b79", check.FaultPostgresOutage: "#637939",
}

// renderPlots draws throughput, latency and the fault timeline of a run.
func renderPlots(r *Result) []plot {
	xs := make([]float64, len(r.Series))
	col := func(f func(point) float64) []float64 {
		out := make([]float64, len(r.Series))
		for i, p := range r.Series {
			out[i] = f(p)
		}
		return out
	}
	for i, p := range r.Series {
		xs[i] = p.T
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
	shades := faultWindows(r)
	loadEnd := r.LoadEnd.Sub(r.LoadStart).Seconds()
	return []plot{
		{file: "throughput.svg", title: "Throughput (per second)", svg: lineChart("Throughput: orders per second", "orders/s", xs, xmax, loadEnd, false, []series1{
			{"sent", "#999999", col(func(p point) float64 { return p.Sent })},
			{"answered ok", "#1f77b4", col(func(p point) float64 { return p.OK })},
			{"decided", "#2ca02c", col(func(p point) float64 { return p.Decided })},
			{"emailed", "#9467bd", col(func(p point) float64 { return p.Emailed })},
			{"shed (503)", "#d62728", col(func(p point) float64 { return p.Shed })},
		}, shades)},
		{file: "latency.svg", title: "Latency", svg: lineChart("Latency (log scale)", "ms", xs, xmax, loadEnd, true, []series1{
			{"client p50", "#1f77b4", col(func(p point) float64 { return msOrNaN(p.P50) })},
			{"client p99", "#aec7e8", col(func(p point) float64 { return msOrNaN(p.P99) })},
			{"accepted POST p99", "#ff7f0e", col(func(p point) float64 { return msOrNaN(p.PostP99) })},
			{"placed→decided p50", "#2ca02c", col(func(p point) float64 { return msOrNaN(p.E2EP50) })},
			{"placed→decided p99", "#98df8a", col(func(p point) float64 { return msOrNaN(p.E2EP99) })},
		}, shades)},
		{file: "faults.svg", title: "Fault timeline", svg: timeline(r, xmax)},
	}
}

// faultWindows are the windows of the faults that last (not the instantaneous
// duplicates and poison), coloured by what they disturb: processes, the network or the
// email provider.
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
	slices.SortFunc(ws, func(a, b window) int { return cmp.Compare(a.from, b.from) })
	return ws
}

// Categories of lasting faults, for shading: a process down or restarting, a link
// faulty, the provider faulty.
var (
	faultCategory = map[string]string{
		check.FaultKill: "process", check.FaultFailpoint: "process", check.FaultBrokerRestart: "process",
		check.FaultResetPeer: "network", check.FaultTimeout: "network", check.FaultLatency: "network", check.FaultLinkDown: "network",
		check.FaultBrokerOutage: "outage", check.FaultPostgresOutage: "outage",
		check.FaultProviderFail: "provider", check.FaultProviderAmbiguous: "provider",
	}
	categoryColors = []struct{ name, color, label string }{
		{"process", "#d62728", "process crash windows"},
		{"network", "#ff7f0e", "network fault windows"},
		{"outage", "#393b79", "broker, Postgres outages"},
		{"provider", "#1f77b4", "provider fault windows"},
	}
)

func lineChart(title, unit string, xs []float64, xmax, loadEnd float64, logY bool, lines []series1, shades []window) string {
	ymin, ymax := 0.0, 1.0
	if logY {
		ymin, ymax = math.Inf(1), 0
	}
	for _, l := range lines {
		for _, y := range l.ys {
			if math.IsNaN(y) {
				continue
			}
			ymax = max(ymax, y)
			if logY && y > 0 {
				ymin = min(ymin, y)
			}
		}
	}
	var ticks []float64
	if logY {
		if math.IsInf(ymin, 1) {
			ymin, ymax = 1, 10
		}
		ymin = math.Pow(10, math.Floor(math.Log10(ymin)))
		ymax = math.Pow(10, math.Ceil(math.Log10(max(ymax, ymin*10))))
		for v := ymin; v <= ymax*1.001; v *= 10 {
			ticks = append(ticks, v)
		}
	} else {
		step := niceStep(ymax / 5)
		ymax = math.Ceil(ymax*1.05/step) * step
		for v := 0.0; v <= ymax+step/2; v += step {
			ticks = append(ticks, v)
		}
	}
	x := func(v float64) float64 { return marginL + v/xmax*plotW }
	y := func(v float64) float64 {
		if logY {
			return marginT + plotH - (math.Log10(v)-math.Log10(ymin))/(math.Log10(ymax)-math.Log10(ymin))*plotH
		}
		return marginT + plotH - (v-ymin)/(ymax-ymin)*plotH
	}
	var b strings.Builder
	svgOpen(&b, title)
	// Each category shades its own band of the height, every window faintly, so that
	// where many overlap the band is dark: density, not just presence. Outages never
	// overlap each other, so theirs are drawn darker.
	band := float64(plotH) / float64(len(categoryColors))
	for _, w := range shades {
		for i, c := range categoryColors {
			if c.name == w.category {
				opacity := 0.07
				if c.name == "outage" {
					opacity = 0.3
				}
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="%g"/>`,
					x(w.from), marginT+float64(i)*band, max(0.5, x(min(w.to, xmax))-x(w.from)), band, c.color, opacity)
			}
		}
	}
	if loadEnd > 0 && loadEnd < xmax {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555" stroke-dasharray="4 3"/>`, x(loadEnd), marginT, x(loadEnd), marginT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#555" text-anchor="end">load ends</text>`, x(loadEnd)-3, marginT-3)
	}
	for _, t := range ticks {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`, marginL, y(t), marginL+plotW, y(t))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>`, marginL-4, y(t)+3, fmtTick(t))
	}
	xAxis(&b, xmax)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" transform="rotate(-90 %d %d)" text-anchor="middle">%s</text>`,
		marginL-44, marginT+plotH/2, marginL-44, marginT+plotH/2, html.EscapeString(unit))
	for i, l := range lines {
		var pts []string
		flush := func() {
			if len(pts) > 1 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`, l.color, strings.Join(pts, " "))
			} else if len(pts) == 1 {
				var px, py float64
				fmt.Sscanf(pts[0], "%f,%f", &px, &py)
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="1.5" fill="%s"/>`, px, py, l.color)
			}
			pts = pts[:0]
		}
		for j, v := range l.ys {
			if math.IsNaN(v) || (logY && v <= 0) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(xs[j]), y(v)))
		}
		flush()
		ly := marginT + 14 + i*16
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d" font-size="11">%s</text>`,
			chartW-marginR+12, ly-4, chartW-marginR+30, ly-4, l.color, chartW-marginR+34, ly, html.EscapeString(l.name))
	}
	for i, c := range categoryColors {
		ly := marginT + 14 + (len(lines)+i)*16
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="18" height="9" fill="%s" opacity="0.35"/><text x="%d" y="%d" font-size="11">%s</text>`,
			chartW-marginR+12, ly-9, c.color, chartW-marginR+34, ly, c.label)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// timeline draws one lane per fault kind, one mark per fault: its window, or a tick for
// an instantaneous one (a duplicate, a poison message).
func timeline(r *Result, xmax float64) string {
	var kinds []string
	for _, c := range r.FaultCounts {
		kinds = append(kinds, c.Kind)
	}
	const lane = 18
	h := marginT + len(kinds)*lane + marginB
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif">`, chartW, h, chartW, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="18" font-size="14" font-weight="bold">Faults over time (filled: hit, hollow: scheduled but missed)</text>`, marginL)
	x := func(v float64) float64 { return marginL + min(v, xmax)/xmax*plotW }
	for i, k := range kinds {
		yy := marginT + i*lane
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" text-anchor="end">%s</text>`, marginL-4, yy+12, k)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`, marginL, yy+lane-1, marginL+plotW, yy+lane-1)
		color := cmp.Or(kindColors[k], "#333")
		for _, f := range r.Faults {
			if f.Kind != k || f.Start.IsZero() {
				continue
			}
			from := f.Start.Sub(r.LoadStart).Seconds()
			to := f.End.Sub(r.LoadStart).Seconds()
			w := max(1.2, x(to)-x(from))
			fill := color
			if !f.Fired {
				fill = "none"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="%s" stroke-width="0.6" opacity="0.8"><title>%s</title></rect>`,
				x(from), yy+3, w, lane-7, fill, color, html.EscapeString(fmt.Sprintf("%s %s %s %s", f.Kind, f.Target, f.Detail, f.Note)))
		}
	}
	// x axis below the lanes
	base := marginT + len(kinds)*lane
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, marginL, base, marginL+plotW, base)
	step := niceStep(xmax / 8)
	for t := 0.0; t <= xmax; t += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%ss</text>`, x(t), base+14, fmtTick(t))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func svgOpen(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`, marginL, html.EscapeString(title))
}

func xAxis(b *strings.Builder, xmax float64) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, marginL, marginT+plotH, marginL+plotW, marginT+plotH)
	step := niceStep(xmax / 8)
	for t := 0.0; t <= xmax; t += step {
		px := marginL + t/xmax*plotW
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/><text x="%.1f" y="%d" font-size="10" text-anchor="middle">%ss</text>`,
			px, marginT+plotH, px, marginT+plotH+4, px, marginT+plotH+16, fmtTick(t))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" text-anchor="middle">seconds since the load started</text>`, marginL+plotW/2, chartH-6)
}

// niceStep rounds a raw axis step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gk", v/1000)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}
