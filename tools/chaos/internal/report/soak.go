package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// The soak's rules: a window's completed orders per second under SoakMinRate of the
// first window's, or a process's RSS at a window's end above SoakMaxRSSGrowth times its
// first window's peak, fails the soak.
const (
	SoakMinRate      = 0.8
	SoakMaxRSSGrowth = 1.2
)

// SoakDrainSlack is how long a fault's backlog is taken to outlast the fault, and how
// much of the rate a window's end may find behind with no fault in effect: in a
// 6-minute soak on the development machine the longest drain after a fault's end was
// 10.4 s (a broker alarm's), and a window's end cuts through whatever is in flight.
const SoakDrainSlack = 15 * time.Second

// Soak rule names, as a failure names them.
const (
	RuleRate       = "rate"
	RuleBacklog    = "backlog"
	RuleRSS        = "rss"
	RuleAutovacuum = "autovacuum"
	RuleInvariants = "invariants"
)

// Capacity is what the soak's probe measured before the run: a closed loop of Load
// orders in flight for Probe, and the orders emailed per second in its last two thirds.
type Capacity struct {
	Probe     time.Duration `json:"probe_ns"`
	Load      int           `json:"concurrency"`
	Emailed   int           `json:"emailed"` // emails the provider accepted in the measured span
	Span      time.Duration `json:"span_ns"` // the measured span: the probe less its first third
	PerSecond float64       `json:"emailed_per_s"`
	Placed    int           `json:"placed"` // orders the probe's customers were told were placed
	ReportDir string        `json:"report_dir"`
}

// SoakTable is one outbox or inbox table at a window's end (pg_stat_user_tables).
type SoakTable struct {
	Name        string `json:"name"` // service.table, e.g. ordering.outbox
	Live        int64  `json:"n_live_tup"`
	Dead        int64  `json:"n_dead_tup"`
	Autovacuums int64  `json:"autovacuum_count"` // since the run's start
	// Disabled: the table's own storage parameters turn autovacuum off.
	Disabled bool `json:"autovacuum_disabled,omitempty"`
}

// SoakProcess is one process at a window's end. A figure that could not be read (the
// process down, frozen by a fault, or its /metrics not answering) is -1.
type SoakProcess struct {
	Name       string `json:"name"`
	RSS        int64  `json:"rss_bytes"`      // VmRSS at the window's end
	PeakRSS    int64  `json:"peak_rss_bytes"` // the most VmRSS of the window's samples
	Goroutines int    `json:"goroutines"`     // go_goroutines of its /metrics
	Sockets    int    `json:"sockets"`        // open sockets: /proc/<pid>/fd entries that are sockets
	Starts     int    `json:"starts"`         // times it was started during the window (restarts by a fault)
	// CPU is the processor time the process used in the window (user and system, from
	// /proc/<pid>/stat between samples; a sample's share is lost across a restart).
	CPU time.Duration `json:"cpu_ns"`
}

// SoakWindow is one window of the soak's load.
type SoakWindow struct {
	N         int           `json:"n"` // from 1
	Start     time.Time     `json:"start"`
	End       time.Time     `json:"end"`
	Completed int           `json:"completed"` // orders whose first email the provider accepted in the window
	PerSecond float64       `json:"completed_per_s"`
	EmailP99  time.Duration `json:"placed_to_emailed_p99_ns"` // of the orders completed in the window
	Faults    int           `json:"faults"`                   // faults scheduled to start in the window
	// Backlog is the orders placed by the window's end whose first email the provider
	// had not accepted by then: how far behind the system is, in orders.
	Backlog int `json:"backlog"`
	// Explained is the backlog the faults in effect at the window's end can account for
	// (SoakBacklogs): the rate times SoakDrainSlack, and times each such fault's time so
	// far plus SoakDrainSlack.
	Explained int           `json:"backlog_explained"`
	Tables    []SoakTable   `json:"tables"`
	Processes []SoakProcess `json:"processes"`
	// Load is the machine's 1-minute load average at the window's end (/proc/loadavg):
	// the soak's own processes and whatever else ran beside them.
	Load float64 `json:"load1"`
}

// SoakFailure is one broken rule: which, in which window (and process), and by how much.
type SoakFailure struct {
	Rule    string `json:"rule"`
	Window  int    `json:"window,omitempty"`
	Process string `json:"process,omitempty"`
	Detail  string `json:"detail"`
}

// SoakReport is the soak's part of a run's report: how the rate was found, the windows,
// and the verdict of the soak's rules and the chaos invariants together.
type SoakReport struct {
	Rate       float64       `json:"rate"`
	RateSource string        `json:"rate_source"`
	Capacity   *Capacity     `json:"capacity,omitempty"`
	Duration   time.Duration `json:"duration_ns"`
	Window     time.Duration `json:"window_ns"`
	Autovacuum string        `json:"autovacuum"` // the server's setting, and where it is set
	Windows    []SoakWindow  `json:"windows"`
	Failures   []SoakFailure `json:"failures"`
	Passed     bool          `json:"passed"`
	// Collect and Check are how long the end of the run took to read every order's
	// outcome (in bulk, and a sample through the APIs) and to check the invariants.
	Collect time.Duration `json:"collect_ns"`
	Check   time.Duration `json:"check_ns"`
}

// SoakCompletions fills each window's completed orders, their rate and their placed →
// emailed p99: an order completes when the provider accepts its first email (to its
// customer's address; each operation has its own), and its latency runs from its
// creation in the ordering database.
func SoakCompletions(windows []SoakWindow, orders []check.Order, emails []check.SentEmail) {
	placed := map[string]time.Time{}
	for _, o := range orders {
		placed[o.CustomerEmail] = o.CreatedAt
	}
	first := firstEmails(emails)
	lat := make([][]time.Duration, len(windows))
	for addr, at := range first {
		p, ok := placed[addr]
		if !ok {
			continue
		}
		for i, w := range windows {
			if !at.Before(w.Start) && at.Before(w.End) {
				lat[i] = append(lat[i], at.Sub(p))
				break
			}
		}
	}
	for i := range windows {
		w := &windows[i]
		slices.Sort(lat[i])
		w.Completed = len(lat[i])
		w.PerSecond = 0
		if d := w.End.Sub(w.Start).Seconds(); d > 0 {
			w.PerSecond = float64(w.Completed) / d
		}
		w.EmailP99 = percentile(lat[i], 0.99)
	}
}

// SoakBacklogs fills each window's Backlog and Explained. A fault is in effect at a
// window's end T when it started before T and ended less than SoakDrainSlack before it
// (or not at all); each one can hold back the rate times its time up to T plus
// SoakDrainSlack (as if it had stopped the whole pipeline), on top of the rate times
// SoakDrainSlack that any end may find behind.
func SoakBacklogs(windows []SoakWindow, orders []check.Order, emails []check.SentEmail, faults []check.Fault, rate float64) {
	first := firstEmails(emails)
	for i := range windows {
		w := &windows[i]
		w.Backlog = 0
		for _, o := range orders {
			if !o.CreatedAt.Before(w.End) {
				continue
			}
			if at, ok := first[o.CustomerEmail]; !ok || !at.Before(w.End) {
				w.Backlog++
			}
		}
		held := SoakDrainSlack
		for _, f := range faults {
			if f.Start.IsZero() || !f.Start.Before(w.End) {
				continue
			}
			end := f.End
			if end.IsZero() || end.After(w.End) {
				end = w.End
			}
			if w.End.Sub(end) < SoakDrainSlack {
				held += end.Sub(f.Start) + SoakDrainSlack
			}
		}
		w.Explained = int(rate * held.Seconds())
	}
}

// firstEmails is each address's first email's time.
func firstEmails(emails []check.SentEmail) map[string]time.Time {
	first := map[string]time.Time{}
	for _, e := range emails {
		if e.CreatedAt.IsZero() {
			continue
		}
		if t, ok := first[e.To]; !ok || e.CreatedAt.Before(t) {
			first[e.To] = e.CreatedAt
		}
	}
	return first
}

// JudgeSoak applies the soak's rules to its windows: every later window's rate at least
// SoakMinRate of the first's; the backlog at the last window's end at most the first
// window's plus what the faults in effect at the last window's end explain (a system
// that keeps up drains every fault's backlog, so a backlog beyond that is one that keeps
// growing, which the rate rule misses when the first window is already behind); every process's RSS at a later window's end at most
// SoakMaxRSSGrowth times its peak in the first window (the peak, not the end: a process
// a fault restarted just before the first window ended would set a baseline it had not
// grown into yet); and no outbox or inbox table with autovacuum turned off. A figure
// that could not be read (-1, or 0 for a process that was down) is not judged.
func JudgeSoak(windows []SoakWindow) []SoakFailure {
	var out []SoakFailure
	if len(windows) < 2 {
		return []SoakFailure{{Rule: RuleRate, Detail: fmt.Sprintf("%d windows: the rules compare later windows with the first", len(windows))}}
	}
	first := windows[0]
	if first.Completed == 0 {
		out = append(out, SoakFailure{Rule: RuleRate, Window: 1, Detail: "no order completed in the first window"})
	}
	base := map[string]int64{}
	for _, p := range first.Processes {
		base[p.Name] = max(p.PeakRSS, p.RSS)
	}
	for _, w := range windows[1:] {
		if first.Completed > 0 && w.PerSecond < SoakMinRate*first.PerSecond {
			out = append(out, SoakFailure{Rule: RuleRate, Window: w.N,
				Detail: fmt.Sprintf("%.1f orders/s, under %.1f × the first window's %.1f/s", w.PerSecond, SoakMinRate, first.PerSecond)})
		}
		for _, p := range w.Processes {
			b := base[p.Name]
			if b <= 0 || p.RSS <= 0 {
				continue
			}
			if float64(p.RSS) > SoakMaxRSSGrowth*float64(b) {
				out = append(out, SoakFailure{Rule: RuleRSS, Window: w.N, Process: p.Name,
					Detail: fmt.Sprintf("RSS %s at the window's end, %+.0f%% over the first window's peak %s (limit %+.0f%%)",
						mib(p.RSS), 100*(float64(p.RSS)/float64(b)-1), mib(b), 100*(SoakMaxRSSGrowth-1))})
			}
		}
	}
	if last := windows[len(windows)-1]; last.Backlog-first.Backlog > last.Explained {
		out = append(out, SoakFailure{Rule: RuleBacklog, Window: last.N,
			Detail: fmt.Sprintf("%d orders placed and not emailed at its end, %d more than at the first window's end; the faults in effect then explain %d", last.Backlog, last.Backlog-first.Backlog, last.Explained)})
	}
	seen := map[string]bool{}
	for _, w := range windows {
		for _, t := range w.Tables {
			if t.Disabled && !seen[t.Name] {
				seen[t.Name] = true
				out = append(out, SoakFailure{Rule: RuleAutovacuum, Window: w.N, Detail: t.Name + " has autovacuum_enabled off in its storage parameters"})
			}
		}
	}
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// PrintSoak writes the soak's window tables and its verdict.
func PrintSoak(w io.Writer, s *SoakReport) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "\nSOAK: %v in windows of %v at %g orders/s (%s); autovacuum %s\n", s.Duration, s.Window, s.Rate, s.RateSource, s.Autovacuum)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WINDOW\tFROM\tORDERS/S\tPLACED→EMAILED P99\tBACKLOG AT END\tFAULTS EXPLAIN\tFAULTS\tLOAD")
	for _, win := range s.Windows {
		fmt.Fprintf(tw, "%d\t%v\t%.1f\t%v\t%d\t%d\t%d\t%.1f\n", win.N, win.Start.Sub(s.Windows[0].Start).Round(time.Second), win.PerSecond, ms(win.EmailP99), win.Backlog, win.Explained, win.Faults, win.Load)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tWINDOW\tLIVE\tDEAD\tAUTOVACUUMS")
	for _, name := range soakTableNames(s.Windows) {
		for _, win := range s.Windows {
			for _, t := range win.Tables {
				if t.Name == name {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", name, win.N, t.Live, t.Dead, t.Autovacuums)
				}
			}
		}
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tWINDOW\tRSS\tPEAK RSS\tVS FIRST PEAK\tGOROUTINES\tSOCKETS\tSTARTS\tCPU")
	base := map[string]int64{}
	if len(s.Windows) > 0 {
		for _, p := range s.Windows[0].Processes {
			base[p.Name] = max(p.PeakRSS, p.RSS)
		}
	}
	for _, name := range soakProcessNames(s.Windows) {
		for _, win := range s.Windows {
			for _, p := range win.Processes {
				if p.Name != name {
					continue
				}
				growth := "-"
				if b := base[name]; b > 0 && p.RSS > 0 {
					growth = fmt.Sprintf("%+.0f%%", 100*(float64(p.RSS)/float64(b)-1))
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", name, win.N, mibOr(p.RSS), mibOr(p.PeakRSS), growth, intOr(p.Goroutines), intOr(p.Sockets), p.Starts, cpuShare(p.CPU, win))
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	if s.Passed {
		fmt.Fprintln(w, "SOAK PASSED")
		return
	}
	fmt.Fprintln(w, "SOAK FAILED")
	for _, f := range s.Failures {
		where := ""
		if f.Window > 0 {
			where = fmt.Sprintf(" window %d", f.Window)
		}
		if f.Process != "" {
			where += " " + f.Process
		}
		fmt.Fprintf(w, "  rule %s%s: %s\n", f.Rule, where, f.Detail)
	}
}

// soakTableNames lists the tables of the windows that held a tuple in any of them.
func soakTableNames(windows []SoakWindow) []string {
	var names []string
	for _, w := range windows {
		for _, t := range w.Tables {
			if (t.Live > 0 || t.Dead > 0) && !slices.Contains(names, t.Name) {
				names = append(names, t.Name)
			}
		}
	}
	return names
}

func soakProcessNames(windows []SoakWindow) []string {
	var names []string
	for _, w := range windows {
		for _, p := range w.Processes {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	return names
}

func mibOr(b int64) string {
	if b <= 0 {
		return "-"
	}
	return mib(b)
}

func intOr(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// writeSoak writes soak.json and soak.md (the verdict and the window tables) to the
// report directory.
func writeSoak(dir string, s *SoakReport) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), b, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	verdict := "PASSED"
	if !s.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(&md, "# Soak: %s\n\n", verdict)
	fmt.Fprintf(&md, "%v of load in windows of %v at %g orders/s (%s); autovacuum %s.\n\n", s.Duration, s.Window, s.Rate, s.RateSource, s.Autovacuum)
	for _, f := range s.Failures {
		fmt.Fprintf(&md, "- rule **%s**", f.Rule)
		if f.Window > 0 {
			fmt.Fprintf(&md, ", window %d", f.Window)
		}
		if f.Process != "" {
			fmt.Fprintf(&md, ", %s", f.Process)
		}
		fmt.Fprintf(&md, ": %s\n", f.Detail)
	}
	if len(s.Failures) > 0 {
		md.WriteString("\n")
	}
	md.WriteString("| Window | From | Orders/s | Placed → emailed p99 | Backlog at end | Faults explain | Faults | Load |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, win := range s.Windows {
		fmt.Fprintf(&md, "| %d | %v | %.1f | %v | %d | %d | %d | %.1f |\n", win.N, win.Start.Sub(s.Windows[0].Start).Round(time.Second), win.PerSecond, ms(win.EmailP99), win.Backlog, win.Explained, win.Faults, win.Load)
	}
	md.WriteString("\n| Table | Window | Live tuples | Dead tuples | Autovacuums |\n|---|---:|---:|---:|---:|\n")
	for _, name := range soakTableNames(s.Windows) {
		for _, win := range s.Windows {
			for _, t := range win.Tables {
				if t.Name == name {
					fmt.Fprintf(&md, "| %s | %d | %d | %d | %d |\n", name, win.N, t.Live, t.Dead, t.Autovacuums)
				}
			}
		}
	}
	md.WriteString("\n| Process | Window | RSS | Peak RSS | Goroutines | Sockets | Starts | CPU |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range soakProcessNames(s.Windows) {
		for _, win := range s.Windows {
			for _, p := range win.Processes {
				if p.Name == name {
					fmt.Fprintf(&md, "| %s | %d | %s | %s | %s | %s | %d | %s |\n", name, win.N, mibOr(p.RSS), mibOr(p.PeakRSS), intOr(p.Goroutines), intOr(p.Sockets), p.Starts, cpuShare(p.CPU, win))
				}
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, "soak.md"), []byte(md.String()), 0o644)
}

// cpuShare is cpu as a share of one core over the window: 50% is half a core's time.
func cpuShare(cpu time.Duration, w SoakWindow) string {
	span := w.End.Sub(w.Start)
	if span <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*cpu.Seconds()/span.Seconds())
}
