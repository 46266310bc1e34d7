package report

import (
	"fmt"
	"html"
	"maps"
	"slices"
	"strings"
	"time"
)

// renderHTML is the self-contained report: verdicts first (what a reader opens it for),
// then the charts, the fault counts, the processes and the configuration.
func renderHTML(r *Result, summary string) (string, error) {
	var b strings.Builder
	esc := html.EscapeString
	verdict := map[bool]string{true: `<span class="ok">PASSED</span>`, false: `<span class="bad">FAILED</span>`}[r.Passed]
	fmt.Fprintf(&b, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Bookstore chaos: %s</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top;font-size:14px}
th{background:#f5f5f5}.ok{color:#2a7d2a;font-weight:bold}.bad{color:#c62828;font-weight:bold}
pre{background:#f7f7f7;padding:1em;overflow-x:auto;font-size:12px}code{font-size:13px}svg{max-width:100%%;height:auto}
</style></head><body>`, esc(r.Design))
	fmt.Fprintf(&b, `<h1>Bookstore chaos run: %s</h1><p>%s — %d violations. Seed %d, %d orders offered at %g/s, %d faults of each kind. Started %s, load %v, quiet after %v.</p>`,
		esc(r.Design), verdict, r.Violations, r.Config.Seed, r.Config.Orders, r.Config.Rate, r.Config.FaultsPerKind,
		r.Started.Format(time.RFC3339), r.LoadEnd.Sub(r.LoadStart).Round(time.Second), r.Quiet.Waited.Round(time.Second))

	b.WriteString(`<h2>Invariants</h2><table><tr><th>#</th><th>invariant</th><th>verdict</th><th>checked</th><th>violations</th></tr>`)
	for _, v := range r.Verdicts {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v.Counts)) {
			parts = append(parts, fmt.Sprintf("%d × %s", v.Counts[k], esc(k)))
		}
		var ex []string
		for _, e := range v.Examples {
			ex = append(ex, fmt.Sprintf("<li><code>%s</code> %s: %s</li>", esc(e.Subject), esc(e.Kind), esc(e.Detail)))
		}
		for _, n := range v.Notes {
			ex = append(ex, "<li><i>"+esc(n)+"</i></li>")
		}
		fmt.Fprintf(&b, `<tr><td>%d</td><td>%s</td><td>%s</td><td>%d</td><td>%s<ul>%s</ul></td></tr>`,
			v.Invariant, esc(v.Title), map[bool]string{true: `<span class="ok">ok</span>`, false: `<span class="bad">violated</span>`}[v.Passed],
			v.Checked, strings.Join(parts, "<br>"), strings.Join(ex, ""))
	}
	b.WriteString(`</table>`)

	b.WriteString(`<h2>Throughput, latency and faults</h2><p>Throughput: operations sent (the offer), accepted (answered 201), decided, emailed (the provider accepted the email) and shed (POST attempts answered 503 with Retry-After), per second. Latency: the client's whole operation, retries included, and each accepted POST attempt alone. Shaded bands, top to bottom: process crash windows (a kill until the restart, a failpoint armed until it fired), network fault windows, broker and Postgres outages, provider fault windows; the darker, the more at once. The dashed line is the end of the load; what follows is the system catching up.</p>`)
	charts, err := chartsHTML(r)
	if err != nil {
		return "", err
	}
	b.WriteString(charts)

	b.WriteString(postsHTML(r))

	b.WriteString(`<h2>Faults</h2><table><tr><th>kind</th><th>scheduled</th><th>started</th><th>hit</th></tr>`)
	for _, c := range r.FaultCounts {
		fmt.Fprintf(&b, `<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td></tr>`, esc(c.Kind), c.Scheduled, c.Started, c.Fired)
	}
	b.WriteString(`</table><p>"Hit" means the fault really happened: a kill found a live process, a failpoint crashed the process within its window, a toxic was applied, a poison message was published.</p>`)

	if len(r.Budgets) > 0 {
		b.WriteString(`<h2>Outages against the budgets they outlasted</h2><p>Before outages were told apart from a message's own failures, an outage spent a retry budget: the relay counted each failed publish against its row and parked it dead at the last attempt; a consumer requeued a message whose database was down until its delivery limit dead-lettered it. The run shrinks both budgets and makes every outage outlast them, so a service that spent them again would lose events, and the checker would say so.</p>`)
		b.WriteString(`<table><tr><th>budget</th><th>held by</th><th>size</th><th>set against</th><th>longest outage it survived before</th><th>reckoned as</th></tr>`)
		for _, bu := range r.Budgets {
			fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%v</td><td>%s</td></tr>`,
				esc(bu.Name), esc(bu.Who), esc(bu.Spends), esc(bu.Kind), ms(bu.Max), esc(bu.How))
		}
		b.WriteString(`</table>`)
		for _, n := range r.Config.BudgetNotes() {
			fmt.Fprintf(&b, `<p>%s</p>`, esc(n))
		}
		b.WriteString(`<table><tr><th>fault</th><th>outage</th><th>at</th><th>length (every link down)</th><th>budget</th><th>outlasted</th></tr>`)
		for _, o := range r.Outages {
			verdict := fmt.Sprintf(`<span class="ok">yes, by %.1f s</span>`, (o.Length - o.BudgetMax).Seconds())
			switch {
			case !o.Hit:
				verdict = "not hit"
			case !o.Outlasted && !o.Required:
				verdict = "no: the budget was not shrunk"
			case !o.Outlasted:
				verdict = `<span class="bad">no</span>`
			}
			fmt.Fprintf(&b, `<tr><td>%d</td><td>%s</td><td>%.1f s</td><td>%.1f s</td><td>%s: %.1f s</td><td>%s</td></tr>`,
				o.FaultID, esc(o.Kind), o.At.Seconds(), o.Length.Seconds(), esc(o.Budget), o.BudgetMax.Seconds(), verdict)
		}
		b.WriteString(`</table>`)
	}

	b.WriteString(`<h2>Processes</h2><table><tr><th>process</th><th>starts</th><th>SIGKILLs</th><th>failpoint crashes</th><th>graceful restarts</th><th>other exits</th></tr>`)
	for _, p := range r.Processes {
		fmt.Fprintf(&b, `<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>`, esc(p.Name), p.Starts, p.Kills, p.FailpointCrashes, p.Restarts, p.OtherExits)
	}
	b.WriteString(`</table><p>Each process's output is in <code>logs/</code>; <code>snapshot.json</code> holds everything the checker saw, <code>report.json</code> this report, <code>series.csv</code> and <code>faults.csv</code> the charts' data.</p>`)

	fmt.Fprintf(&b, `<h2>Summary</h2><pre>%s</pre></body></html>`, esc(summary))
	return b.String(), nil
}
