package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

const mb = 1 << 20

// steadyWindows builds n windows of a minute, each completing perSecond orders a second,
// with two processes whose RSS stays at 40 and 60 MiB.
func steadyWindows(n int, perSecond float64) []SoakWindow {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var ws []SoakWindow
	for i := range n {
		ws = append(ws, SoakWindow{
			N: i + 1, Start: start.Add(time.Duration(i) * time.Minute), End: start.Add(time.Duration(i+1) * time.Minute),
			Completed: int(perSecond * 60), PerSecond: perSecond,
			Tables: []SoakTable{{Name: "ordering.outbox", Live: 1000, Dead: 50}},
			Processes: []SoakProcess{
				{Name: "ordering", RSS: 40 * mb, PeakRSS: 40 * mb, Goroutines: 50, Sockets: 20},
				{Name: "inventory-1", RSS: 60 * mb, PeakRSS: 60 * mb, Goroutines: 40, Sockets: 15},
			},
		})
	}
	return ws
}

func rules(fs []SoakFailure) string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s/%d/%s", f.Rule, f.Window, f.Process))
	}
	return strings.Join(out, " ")
}

func TestASteadySoakBreaksNoRule(t *testing.T) {
	if fs := JudgeSoak(steadyWindows(6, 40)); len(fs) != 0 {
		t.Errorf("steady windows failed: %+v", fs)
	}
}

func TestAWindowUnderFourFifthsOfTheFirstsRateFailsTheRateRule(t *testing.T) {
	ws := steadyWindows(4, 40)
	ws[2].PerSecond, ws[2].Completed = 31.9, 1914 // just under 0.8 × 40
	ws[3].PerSecond, ws[3].Completed = 32.0, 1920 // exactly 0.8 × 40: allowed
	if got := rules(JudgeSoak(ws)); got != "rate/3/" {
		t.Errorf("failures %q, want the rate rule in window 3 alone", got)
	}
}

func TestAFirstWindowWithNoCompletedOrderFails(t *testing.T) {
	ws := steadyWindows(3, 40)
	ws[0].PerSecond, ws[0].Completed = 0, 0
	if got := rules(JudgeSoak(ws)); got != "rate/1/" {
		t.Errorf("failures %q, want the rate rule in window 1", got)
	}
}

func TestRSSGrowingMoreThanAFifthOverTheFirstWindowsPeakFailsTheRSSRule(t *testing.T) {
	ws := steadyWindows(5, 40)
	// ordering leaks: +10%, +20% (the limit), +21%, +40%; inventory-1 stays.
	for i, grow := range []float64{1.10, 1.20, 1.21, 1.40} {
		p := &ws[i+1].Processes[0]
		p.RSS = int64(grow * 40 * mb)
		p.PeakRSS = p.RSS
	}
	if got := rules(JudgeSoak(ws)); got != "rss/4/ordering rss/5/ordering" {
		t.Errorf("failures %q, want the RSS rule for ordering in windows 4 and 5", got)
	}
}

func TestTheRSSBaselineIsTheFirstWindowsPeakNotItsEnd(t *testing.T) {
	ws := steadyWindows(3, 40)
	// Restarted by a fault just before the first window ended: 15 MiB then, 40 at its peak.
	ws[0].Processes[0].RSS = 15 * mb
	if fs := JudgeSoak(ws); len(fs) != 0 {
		t.Errorf("a process restarted at the first window's end failed the later ones: %+v", fs)
	}
	ws[2].Processes[0].RSS = 49 * mb
	if got := rules(JudgeSoak(ws)); got != "rss/3/ordering" {
		t.Errorf("failures %q, want the RSS rule for ordering in window 3", got)
	}
}

func TestAProcessDownAtAWindowsEndIsNotJudged(t *testing.T) {
	ws := steadyWindows(3, 40)
	ws[1].Processes[1].RSS, ws[1].Processes[1].Goroutines, ws[1].Processes[1].Sockets = 0, -1, -1
	if fs := JudgeSoak(ws); len(fs) != 0 {
		t.Errorf("a process down at a window's end failed: %+v", fs)
	}
}

func TestATableWithAutovacuumTurnedOffFailsOnce(t *testing.T) {
	ws := steadyWindows(3, 40)
	for i := range ws {
		ws[i].Tables[0].Disabled = true
	}
	if got := rules(JudgeSoak(ws)); got != "autovacuum/1/" {
		t.Errorf("failures %q, want the autovacuum rule once", got)
	}
}

func TestASoakOfOneWindowCannotPass(t *testing.T) {
	if fs := JudgeSoak(steadyWindows(1, 40)); len(fs) == 0 {
		t.Error("one window passed: there is nothing to compare it with")
	}
}

func TestCompletionsCountEachOrdersFirstEmailInTheWindowItFellIn(t *testing.T) {
	ws := steadyWindows(2, 0)
	t0 := ws[0].Start
	order := func(addr string, at time.Duration) check.Order {
		return check.Order{ID: uuid.New(), CustomerEmail: addr, CreatedAt: t0.Add(at)}
	}
	email := func(addr string, at time.Duration) check.SentEmail {
		return check.SentEmail{To: addr, CreatedAt: t0.Add(at)}
	}
	orders := []check.Order{order("a", 0), order("b", 10*time.Second), order("c", 50*time.Second), order("d", 70*time.Second)}
	emails := []check.SentEmail{
		email("a", time.Second), email("a", 90*time.Second), // confirmed, then cancelled: completes once, at its first
		email("b", 13*time.Second),
		email("c", 65*time.Second), // placed in the first window, completed in the second
		email("d", 3*time.Minute),  // after the last window
		email("stranger", 20*time.Second),
	}
	SoakCompletions(ws, orders, emails)
	if ws[0].Completed != 2 || ws[1].Completed != 1 {
		t.Fatalf("completed %d and %d, want 2 and 1", ws[0].Completed, ws[1].Completed)
	}
	if want := 2.0 / 60; ws[0].PerSecond != want {
		t.Errorf("first window %v orders/s, want %v", ws[0].PerSecond, want)
	}
	if ws[0].EmailP99 != 3*time.Second || ws[1].EmailP99 != 15*time.Second {
		t.Errorf("p99 %v and %v, want 3s and 15s", ws[0].EmailP99, ws[1].EmailP99)
	}
}

func TestTheSoakReportNamesTheBrokenRuleInItsFiles(t *testing.T) {
	ws := steadyWindows(3, 40)
	ws[2].PerSecond = 10
	s := &SoakReport{Rate: 40, RateSource: "given", Duration: 3 * time.Minute, Window: time.Minute, Autovacuum: "on", Windows: ws}
	s.Failures = JudgeSoak(ws)
	s.Passed = len(s.Failures) == 0
	dir := t.TempDir()
	if err := writeSoak(dir, s); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "soak.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Soak: FAILED", "rule **rate**, window 3", "| 3 | 2m0s | 10.0 |", "| ordering.outbox | 1 | 1000 | 50 | 0 |", "| ordering | 3 | 40.0 MiB |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("soak.md lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "soak.json")); err != nil {
		t.Error(err)
	}
	var printed strings.Builder
	PrintSoak(&printed, s)
	if !strings.Contains(printed.String(), "SOAK FAILED\n  rule rate window 3:") {
		t.Errorf("the printed verdict does not name the rule:\n%s", printed.String())
	}
}

func TestABacklogThatKeepsGrowingFailsTheBacklogRuleWhileTheRateHolds(t *testing.T) {
	ws := steadyWindows(3, 40)
	ws[0].Backlog, ws[1].Backlog, ws[2].Backlog = 1000, 2000, 3000
	ws[2].Explained = 600
	if got := rules(JudgeSoak(ws)); got != "backlog/3/" {
		t.Errorf("a backlog grown by 2000 with 600 explained broke %q, want backlog/3/", got)
	}
}

func TestABacklogTheFaultsInEffectExplainBreaksNoRule(t *testing.T) {
	ws := steadyWindows(3, 40)
	ws[0].Backlog, ws[2].Backlog = 1000, 1600
	ws[2].Explained = 600
	if fs := JudgeSoak(ws); len(fs) != 0 {
		t.Errorf("a backlog grown by exactly what the faults explain broke %v", fs)
	}
}

func TestTheBacklogIsTheOrdersPlacedAndNotYetEmailedAndFaultsInEffectExplainPartOfIt(t *testing.T) {
	ws := steadyWindows(2, 0)
	t0 := ws[0].Start
	var orders []check.Order
	var emails []check.SentEmail
	for i, c := range []struct {
		placed, emailed time.Duration // 0 emailed: never
	}{
		{0, time.Second},                     // done in the first window
		{50 * time.Second, 70 * time.Second}, // behind at the first window's end only
		{100 * time.Second, 0},               // behind at the second's
		{110 * time.Second, 130 * time.Second},
	} {
		addr := fmt.Sprint("c", i)
		orders = append(orders, check.Order{ID: uuid.New(), CustomerEmail: addr, CreatedAt: t0.Add(c.placed)})
		if c.emailed > 0 {
			emails = append(emails, check.SentEmail{To: addr, CreatedAt: t0.Add(c.emailed)})
		}
	}
	faults := []check.Fault{
		{Start: t0.Add(10 * time.Second), End: t0.Add(20 * time.Second)},   // long over at both ends
		{Start: t0.Add(110 * time.Second), End: t0.Add(115 * time.Second)}, // ended 5 s before the second's end
		{Start: t0.Add(119 * time.Second)},                                 // not ended
		{At: 30 * time.Second},                                             // never injected
	}
	SoakBacklogs(ws, orders, emails, faults, 2)
	if ws[0].Backlog != 1 || ws[1].Backlog != 2 {
		t.Errorf("backlogs %d and %d, want 1 and 2", ws[0].Backlog, ws[1].Backlog)
	}
	slack := SoakDrainSlack.Seconds()
	if want := int(2 * slack); ws[0].Explained != want {
		t.Errorf("the first window's end explains %d with no fault in effect, want the slack's %d", ws[0].Explained, want)
	}
	if want := int(2 * (slack + (5 + slack) + (1 + slack))); ws[1].Explained != want {
		t.Errorf("the second window's end explains %d, want %d (the slack, and two faults in effect)", ws[1].Explained, want)
	}
}
