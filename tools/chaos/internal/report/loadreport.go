package report

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/load"
)

// The report's view of the load itself (every run has it; make chaos-load is where it
// matters): every POST /orders attempt as the client saw it, load shedding (503 with
// Retry-After) against timeouts, the latency of the accepted POSTs during the faults and
// between them, and how long the system took to catch up after each outage.

// PostStats sums up every POST /orders attempt.
type PostStats struct {
	Tries        int           `json:"tries"`
	Accepted     int           `json:"accepted"`          // 201, or 200 replayed
	Shed         int           `json:"shed"`              // 503 with Retry-After: refused before anything was done
	Shed503NoRA  int           `json:"shed_without_ra"`   // 503 without Retry-After (must be 0)
	Other5xx     int           `json:"other_5xx"`         // 500 and the like: may have happened
	Conflict     int           `json:"conflict"`          // 409: the same key still in flight
	Timeouts     int           `json:"timeouts"`          // no answer within the attempt's timeout
	Broken       int           `json:"broken"`            // no answer, not a timeout (reset, refused)
	Rejected     int           `json:"rejected"`          // operations that ended refused by 503s alone
	AcceptedP50  time.Duration `json:"accepted_p50_ns"`   // latency of the accepted attempts
	AcceptedP99  time.Duration `json:"accepted_p99_ns"`   //
	AcceptedMax  time.Duration `json:"accepted_max_ns"`   //
	ShedP99      time.Duration `json:"shed_p99_ns"`       // how promptly a 503 came
	OfferedPerS  float64       `json:"offered_per_s"`     // operations started per second of load
	AttemptsPerS float64       `json:"attempts_per_s"`    // attempts per second of load, retries included
	Phases       []PhaseStats  `json:"phases,omitempty"`  // the same, by what was going on when it was sent
	Drains       []Drain       `json:"drains,omitempty"`  // catching up after each outage
	Emailed      int           `json:"emailed,omitempty"` // emails the provider accepted
}

// PhaseStats is the POST attempts sent during one kind of moment of the load.
type PhaseStats struct {
	Phase       string        `json:"phase"`
	Tries       int           `json:"tries"`
	Accepted    int           `json:"accepted"`
	Shed        int           `json:"shed"`
	Timeouts    int           `json:"timeouts"`
	AcceptedP50 time.Duration `json:"accepted_p50_ns"`
	AcceptedP99 time.Duration `json:"accepted_p99_ns"`
}

// Drain is how long the system took, after an outage ended, to decide and email every
// order placed before its end.
type Drain struct {
	FaultID int           `json:"fault_id"`
	Kind    string        `json:"kind"`
	End     time.Duration `json:"end_ns"`     // from the load's start
	Backlog int           `json:"backlog"`    // orders placed before the end, undecided at it
	Decided time.Duration `json:"decided_ns"` // from the end to the last of them decided
	Emailed time.Duration `json:"emailed_ns"` // from the end to the last of their outcome emails
}

// Phases of the load, for the POST latency: what was going on when an attempt was sent.
const (
	phaseOutage   = "during an outage"
	phaseOrdering = "during a fault of ordering (process or link)"
	phaseOther    = "during other faults only"
	phaseBetween  = "between faults"
)

var phaseOrder = []string{phaseOutage, phaseOrdering, phaseOther, phaseBetween}

// SummarizePosts sums up the attempts of h against the run's faults, orders and emails.
func SummarizePosts(loadStart, loadEnd time.Time, h []check.ClientOp, faults []check.Fault, orders []check.Order, emails []check.SentEmail) PostStats {
	var s PostStats
	var accepted, shed []time.Duration
	byPhase := map[string]*PhaseStats{}
	phaseLat := map[string][]time.Duration{}
	windows := phaseWindows(faults)
	for _, op := range h {
		if op.Outcome == check.OutcomeFailed && op.Shed > 0 {
			s.Rejected++
		}
		for _, t := range op.Tries {
			s.Tries++
			ph := phaseOf(t.At, windows)
			p := byPhase[ph]
			if p == nil {
				p = &PhaseStats{Phase: ph}
				byPhase[ph] = p
			}
			p.Tries++
			switch {
			case t.Status == http.StatusCreated || t.Status == http.StatusOK:
				s.Accepted++
				p.Accepted++
				accepted = append(accepted, t.Took)
				phaseLat[ph] = append(phaseLat[ph], t.Took)
			case t.Status == http.StatusServiceUnavailable && t.RetryAfter:
				s.Shed++
				p.Shed++
				shed = append(shed, t.Took)
			case t.Status == http.StatusServiceUnavailable:
				s.Shed503NoRA++
			case t.Status == http.StatusConflict:
				s.Conflict++
			case t.Status >= 500:
				s.Other5xx++
			case t.Status == 0 && t.Timeout:
				s.Timeouts++
				p.Timeouts++
			case t.Status == 0:
				s.Broken++
			}
		}
	}
	slices.Sort(accepted)
	slices.Sort(shed)
	s.AcceptedP50, s.AcceptedP99 = percentile(accepted, 0.5), percentile(accepted, 0.99)
	if len(accepted) > 0 {
		s.AcceptedMax = accepted[len(accepted)-1]
	}
	s.ShedP99 = percentile(shed, 0.99)
	if d := loadEnd.Sub(loadStart).Seconds(); d > 0 {
		s.OfferedPerS = float64(len(h)) / d
		s.AttemptsPerS = float64(s.Tries) / d
	}
	for _, ph := range phaseOrder {
		if p := byPhase[ph]; p != nil {
			lat := phaseLat[ph]
			slices.Sort(lat)
			p.AcceptedP50, p.AcceptedP99 = percentile(lat, 0.5), percentile(lat, 0.99)
			s.Phases = append(s.Phases, *p)
		}
	}
	s.Drains = drains(loadStart, faults, orders, emails)
	s.Emailed = len(emails)
	return s
}

type phaseWindow struct {
	from, to time.Time
	phase    string
}

// phaseWindows are the lasting faults that hit, each with the phase it puts the load in.
func phaseWindows(faults []check.Fault) []phaseWindow {
	var out []phaseWindow
	for _, f := range faults {
		if !f.Fired || f.Start.IsZero() || f.End.IsZero() || !f.End.After(f.Start) {
			continue
		}
		ph := phaseOther
		switch {
		case check.IsOutage(f.Kind):
			ph = phaseOutage
		case touchesOrdering(f.Target):
			ph = phaseOrdering
		}
		out = append(out, phaseWindow{f.Start, f.End, ph})
	}
	return out
}

// touchesOrdering reports a fault's target that is an ordering process, one of its links,
// the client's link to one, or ordering as a service.
func touchesOrdering(target string) bool {
	return target == "ordering" || strings.HasPrefix(target, "ordering-") || strings.HasPrefix(target, "client-ordering")
}

// phaseOf is the phase at t: an outage first, then a fault of ordering, then any other.
func phaseOf(t time.Time, windows []phaseWindow) string {
	best := len(phaseOrder) - 1
	for _, w := range windows {
		if t.Before(w.from) || t.After(w.to) {
			continue
		}
		best = min(best, slices.Index(phaseOrder, w.phase))
	}
	return phaseOrder[best]
}

// drains measures, for each outage that hit, how long after its end the system decided
// and emailed every order placed before it: the backlog the outage left, worked off while
// the load went on.
func drains(loadStart time.Time, faults []check.Fault, orders []check.Order, emails []check.SentEmail) []Drain {
	lastEmail := map[string]time.Time{} // customer address -> its last outcome email
	for _, e := range emails {
		if strings.HasSuffix(e.IdempotencyKey, "/order-cancelled") || e.CreatedAt.IsZero() {
			continue
		}
		if e.CreatedAt.After(lastEmail[e.To]) {
			lastEmail[e.To] = e.CreatedAt
		}
	}
	var out []Drain
	for _, f := range faults {
		if !check.IsOutage(f.Kind) || !f.Fired || f.End.IsZero() {
			continue
		}
		d := Drain{FaultID: f.ID, Kind: f.Kind, End: f.End.Sub(loadStart)}
		for _, o := range orders {
			if o.CreatedAt.After(f.End) || (o.Status != check.StatusConfirmed && o.Status != check.StatusRejected) {
				continue // placed after it, or cancelled (its updated_at is the cancellation's)
			}
			if o.UpdatedAt.After(f.End) {
				d.Backlog++
				d.Decided = max(d.Decided, o.UpdatedAt.Sub(f.End))
			}
			if at, ok := lastEmail[o.CustomerEmail]; ok && at.After(f.End) {
				d.Emailed = max(d.Emailed, at.Sub(f.End))
			}
		}
		out = append(out, d)
	}
	return out
}

// printPosts writes the POST attempts, by outcome and by phase, and the drains.
func printPosts(w io.Writer, r *Result) {
	p := r.Posts
	if p.Tries == 0 {
		return
	}
	pct := func(n int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(p.Tries)) }
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "POST /orders\t%d attempts (%.0f/s; %.0f operations/s offered)\n", p.Tries, p.AttemptsPerS, p.OfferedPerS)
	fmt.Fprintf(tw, "  accepted\t%d (%s), p50 %v  p99 %v  max %v\n", p.Accepted, pct(p.Accepted), ms(p.AcceptedP50), ms(p.AcceptedP99), ms(p.AcceptedMax))
	fmt.Fprintf(tw, "  shed: 503 + Retry-After\t%d (%s), p99 %v; %d operations ended rejected\n", p.Shed, pct(p.Shed), ms(p.ShedP99), p.Rejected)
	fmt.Fprintf(tw, "  503 without Retry-After\t%d\n", p.Shed503NoRA)
	fmt.Fprintf(tw, "  timeouts (%v)\t%d (%s)\n", load.AttemptTimeout, p.Timeouts, pct(p.Timeouts))
	fmt.Fprintf(tw, "  other\t%d 5xx, %d 409 (key in flight), %d connections broken or refused\n", p.Other5xx, p.Conflict, p.Broken)
	tw.Flush()
	if len(p.Phases) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POSTS SENT\tATTEMPTS\tACCEPTED\tSHED\tTIMEOUTS\tACCEPTED P50\tACCEPTED P99")
		for _, ph := range p.Phases {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%v\n", ph.Phase, ph.Tries, ph.Accepted, ph.Shed, ph.Timeouts, ms(ph.AcceptedP50), ms(ph.AcceptedP99))
		}
		tw.Flush()
	}
	if len(p.Drains) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DRAIN AFTER\tENDED AT\tBACKLOG (ORDERS)\tALL DECIDED AFTER\tALL EMAILED AFTER")
		for _, d := range p.Drains {
			fmt.Fprintf(tw, "%s\t%.1fs\t%d\t%v\t%v\n", d.Kind, d.End.Seconds(), d.Backlog, ms(d.Decided), ms(d.Emailed))
		}
		tw.Flush()
	}
}

// postsHTML is the same as a section of report.html.
func postsHTML(r *Result) string {
	var b strings.Builder
	p := r.Posts
	if p.Tries == 0 {
		return ""
	}
	esc := html.EscapeString
	pct := func(n int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(p.Tries)) }
	b.WriteString(`<h2>POST /orders: accepted, shed, timed out</h2><p>Every attempt as the client saw it. A 503 with Retry-After is ordering shedding load: it refused the request before doing anything, so the customer knows the order was not placed (<a href="https://github.com/bookstore-go/bookstore/blob/main/docs/problems.md#overloaded">overloaded</a>).</p><table>`)
	fmt.Fprintf(&b, `<tr><th>attempts</th><td>%d (%.0f/s; %.0f operations/s offered)</td></tr>`, p.Tries, p.AttemptsPerS, p.OfferedPerS)
	fmt.Fprintf(&b, `<tr><th>accepted</th><td>%d (%s); p50 %v, p99 %v, max %v</td></tr>`, p.Accepted, pct(p.Accepted), ms(p.AcceptedP50), ms(p.AcceptedP99), ms(p.AcceptedMax))
	fmt.Fprintf(&b, `<tr><th>shed (503 + Retry-After)</th><td>%d (%s); p99 %v; %d operations ended rejected</td></tr>`, p.Shed, pct(p.Shed), ms(p.ShedP99), p.Rejected)
	fmt.Fprintf(&b, `<tr><th>503 without Retry-After</th><td>%d</td></tr>`, p.Shed503NoRA)
	fmt.Fprintf(&b, `<tr><th>timeouts (%v)</th><td>%d (%s)</td></tr>`, load.AttemptTimeout, p.Timeouts, pct(p.Timeouts))
	fmt.Fprintf(&b, `<tr><th>other</th><td>%d 5xx, %d 409, %d connections broken or refused</td></tr></table>`, p.Other5xx, p.Conflict, p.Broken)
	b.WriteString(`<table><tr><th>sent</th><th>attempts</th><th>accepted</th><th>shed</th><th>timeouts</th><th>accepted p50</th><th>accepted p99</th></tr>`)
	for _, ph := range p.Phases {
		fmt.Fprintf(&b, `<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%v</td><td>%v</td></tr>`, esc(ph.Phase), ph.Tries, ph.Accepted, ph.Shed, ph.Timeouts, ms(ph.AcceptedP50), ms(ph.AcceptedP99))
	}
	b.WriteString(`</table>`)
	if len(p.Drains) > 0 {
		b.WriteString(`<h2>Draining after each outage</h2><p>The orders placed before the outage ended and still undecided at its end, and how long after it the last of them was decided and emailed, while the load went on.</p><table><tr><th>outage</th><th>ended at</th><th>backlog (orders)</th><th>all decided after</th><th>all emailed after</th></tr>`)
		for _, d := range p.Drains {
			fmt.Fprintf(&b, `<tr><td>%s</td><td>%.1f s</td><td>%d</td><td>%v</td><td>%v</td></tr>`, esc(d.Kind), d.End.Seconds(), d.Backlog, ms(d.Decided), ms(d.Emailed))
		}
		b.WriteString(`</table>`)
	}
	return b.String()
}
