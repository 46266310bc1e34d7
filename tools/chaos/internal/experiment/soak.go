package experiment

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/load"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/report"
)

// Soak is make soak: on the run's own Postgres server (-postgres own, the profile's
// default), it checks that autovacuum is on, measures the system's capacity (unless the
// rate was given), runs the chaos experiment at half of it for the soak's duration with
// every fault kind at a low rate, and prints the summary with the window table. The
// probe and the run share the server. It returns ErrViolations when an invariant or a
// soak rule failed.
func Soak(ctx context.Context, cfg config.Config, stdout, progress io.Writer) error {
	stopPostgres, err := ownPostgres(ctx, &cfg, progress)
	if err != nil {
		return err
	}
	logDir := "" // the run's, once it has one: the server's log is kept with its logs
	defer func() { stopPostgres(logDir) }()
	av, err := autovacuumSetting(ctx, cfg.AdminURL)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(av, "on") {
		return fmt.Errorf("autovacuum is %s on the server: the soak measures the outbox and inbox under autovacuum, as in production; run it on a server of its own (-postgres own, the soak's default) or on one with autovacuum on", av)
	}
	source := fmt.Sprintf("given: -rate %g", cfg.Rate)
	var capacity *report.Capacity
	if cfg.Soak.MeasureRate {
		c, err := measureCapacity(ctx, cfg, progress)
		if err != nil {
			return fmt.Errorf("capacity probe: %w", err)
		}
		capacity = &c
		rate := float64(int(c.PerSecond/2*10)) / 10
		if rate <= 0 {
			return fmt.Errorf("capacity probe: %d orders emailed in %v: no capacity to take half of (see %s)", c.Emailed, c.Span, c.ReportDir)
		}
		cfg.SetSoakRate(rate)
		source = fmt.Sprintf("measured: half of %.1f orders emailed/s, %d in flight for %v", c.PerSecond, c.Load, c.Probe)
	}
	fmt.Fprintf(progress, "chaos: soak at %g orders/s (%s) for %v in windows of %v; autovacuum %s\n", cfg.Rate, source, cfg.Soak.Duration, cfg.Soak.Window, av)
	res, err := run(ctx, cfg, progress, &soakInfo{rateSource: source, autovacuum: av, capacity: capacity})
	if res != nil {
		logDir = filepath.Join(res.ReportDir, "logs")
	}
	if err != nil {
		return err
	}
	report.PrintSummary(stdout, res)
	if !res.Passed {
		return ErrViolations
	}
	return nil
}

// soakInfo is what the soak found before its run: how its rate was found, the server's
// autovacuum, and the capacity probe's figures when there was one.
type soakInfo struct {
	rateSource, autovacuum string
	capacity               *report.Capacity
}

// autovacuumSetting returns the server's autovacuum setting and, when a file sets it,
// which: "off (/etc/postgresql/15/main/conf.d/90-ci.conf)".
func autovacuumSetting(ctx context.Context, adminURL string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	var setting, file string
	err = conn.QueryRow(ctx, `SELECT setting, coalesce(sourcefile, '') FROM pg_settings WHERE name = 'autovacuum'`).Scan(&setting, &file)
	if err != nil {
		return "", fmt.Errorf("postgres: read autovacuum: %w", err)
	}
	if file != "" {
		setting += " (" + file + ")"
	}
	return setting, nil
}

// measureCapacity starts the system on the run's stores without faults and runs a closed
// loop of cfg.Soak.ProbeLoad customers for cfg.Soak.Probe, through the client links and
// with the cancellations of the soak's load; the capacity is the orders the provider
// emailed per second in the probe's last two thirds (the first fills the pipeline),
// counting an order's first email only. The stores are reset again by the run that follows.
func measureCapacity(ctx context.Context, cfg config.Config, progress io.Writer) (report.Capacity, error) {
	probe := cfg
	probe.Rate = 1e6 // every customer at once: the in-flight cap makes it a closed loop
	probe.MaxInFlight = cfg.Soak.ProbeLoad
	probe.Orders = int(cfg.Soak.Probe.Seconds() * 2000) // more than the system can take in the probe
	c := report.Capacity{Probe: cfg.Soak.Probe, Load: cfg.Soak.ProbeLoad}
	c.ReportDir = filepath.Join(cfg.ReportRoot, time.Now().Format("20060102-150405")+"-capacity")
	if err := os.MkdirAll(filepath.Join(c.ReportDir, "logs"), 0o755); err != nil {
		return c, err
	}
	fmt.Fprintf(progress, "chaos: measuring capacity: %d orders in flight for %v, no faults (logs in %s)\n", c.Load, c.Probe, c.ReportDir)
	if err := harness.ResetStores(ctx, probe, nil); err != nil {
		return c, err
	}
	sys, err := harness.Start(ctx, probe, nil, c.ReportDir, nil)
	if err != nil {
		return c, err
	}
	defer sys.Stop()
	books, err := stockBooks(ctx, sys, probe)
	if err != nil {
		return c, err
	}
	// The soak's path: each API through a client link of its own.
	var apis []string
	for _, name := range probe.OrderingAPIs() {
		link, err := sys.Net.AddLink("client-"+name, sys.Process(name).HTTPAddr)
		if err != nil {
			return c, err
		}
		apis = append(apis, "http://"+link)
	}
	customers := load.Plan(probe, books, apis)
	start := time.Now()
	sending, stop := context.WithDeadline(ctx, start.Add(c.Probe))
	defer stop()
	history := customers.RunSending(ctx, sending)
	if ctx.Err() != nil {
		return c, ctx.Err()
	}
	for _, op := range history {
		if op.Outcome == check.OutcomeOK {
			c.Placed++
		}
	}
	from, to := start.Add(c.Probe/3), start.Add(c.Probe)
	c.Span = to.Sub(from)
	err = sys.DBs["emailprovider"].QueryRow(ctx, `
		SELECT count(*) FROM (SELECT recipient, min(created_at) AS first FROM emails GROUP BY recipient) f
		WHERE first >= $1 AND first < $2`, from, to).Scan(&c.Emailed)
	if err != nil {
		return c, fmt.Errorf("count emails: %w", err)
	}
	c.PerSecond = float64(c.Emailed) / c.Span.Seconds()
	fmt.Fprintf(progress, "chaos: capacity %.1f orders emailed/s (%d emailed in the probe's last %v; %d placed in all)\n", c.PerSecond, c.Emailed, c.Span.Round(time.Second), c.Placed)
	return c, nil
}

// soakSampler reads, at the end of each of the soak's windows, every process's memory,
// goroutines and sockets and the outbox and inbox tables' tuples, and every few seconds
// between, each process's RSS for the window's peak.
type soakSampler struct {
	sys     *harness.System
	cfg     config.Config
	info    soakInfo
	start   time.Time
	cancel  context.CancelFunc
	done    chan struct{}
	windows []report.SoakWindow
}

// soakSampleEvery is how often the sampler reads RSS between window ends.
const soakSampleEvery = 5 * time.Second

func startSoak(ctx context.Context, sys *harness.System, cfg config.Config, info soakInfo, start time.Time) *soakSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &soakSampler{sys: sys, cfg: cfg, info: info, start: start, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(s.done); s.run(ctx) }()
	return s
}

func (s *soakSampler) run(ctx context.Context) {
	starts := s.starts()
	lastCPU := cpuSamples{}
	for n := range s.cfg.SoakWindows() {
		w := report.SoakWindow{N: n + 1, Start: s.start.Add(time.Duration(n) * s.cfg.Soak.Window), End: s.start.Add(time.Duration(n+1) * s.cfg.Soak.Window)}
		peak := map[string]int64{}
		used := map[string]time.Duration{}
		for {
			for _, p := range s.sys.Procs {
				pid := p.Pid()
				if rss := readRSS(pid); rss > peak[p.Name] {
					peak[p.Name] = rss
				}
				used[p.Name] += lastCPU.advance(p.Name, pid)
			}
			if !harness.Sleep(ctx, min(soakSampleEvery, time.Until(w.End))) {
				return
			}
			if !time.Now().Before(w.End) {
				break
			}
		}
		now := s.starts()
		for _, p := range s.sys.Procs {
			pid := p.Pid()
			sp := report.SoakProcess{Name: p.Name, RSS: readRSS(pid), Goroutines: goroutines(ctx, p.HTTPAddr), Sockets: sockets(pid), Starts: now[p.Name] - starts[p.Name]}
			sp.PeakRSS = max(peak[p.Name], sp.RSS)
			sp.CPU = used[p.Name] + lastCPU.advance(p.Name, pid)
			w.Processes = append(w.Processes, sp)
		}
		starts = now
		w.Load = loadAverage()
		w.Tables = s.tables(ctx)
		s.windows = append(s.windows, w)
	}
}

func (s *soakSampler) starts() map[string]int {
	out := map[string]int{}
	for _, st := range s.sys.ProcessStats() {
		out[st.Name] = st.Starts
	}
	return out
}

// tables reads the outbox and inbox tables of every service's database that has them.
func (s *soakSampler) tables(ctx context.Context) []report.SoakTable {
	var out []report.SoakTable
	for _, svc := range []string{"ordering", "inventory", "notification"} {
		db := s.sys.DBs[svc]
		if db == nil {
			continue
		}
		rows, err := db.Query(ctx, `
			SELECT s.relname, s.n_live_tup, s.n_dead_tup, s.autovacuum_count,
			       coalesce(c.reloptions::text, '') ~ 'autovacuum_enabled=(false|off|no|0)'
			FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
			WHERE s.relname IN ('outbox', 'inbox') ORDER BY s.relname DESC`)
		if err != nil {
			continue
		}
		for rows.Next() {
			var t report.SoakTable
			var name string
			if rows.Scan(&name, &t.Live, &t.Dead, &t.Autovacuums, &t.Disabled) == nil {
				t.Name = svc + "." + name
				out = append(out, t)
			}
		}
		rows.Close()
	}
	return out
}

// finish waits for the last window's sample and returns the soak's report: the windows
// with their completions (from the snapshot) and faults, and the verdict of the soak's
// rules together with the invariants'.
func (s *soakSampler) finish(ctx context.Context, snap check.Snapshot, faults []check.Fault, invariantsPassed bool) *report.SoakReport {
	select {
	case <-s.done:
	case <-ctx.Done():
		s.cancel()
		<-s.done
	}
	windows := s.windows
	report.SoakCompletions(windows, snap.Orders, snap.Emails)
	report.SoakBacklogs(windows, snap.Orders, snap.Emails, faults, s.cfg.Rate)
	for i := range windows {
		for _, f := range faults {
			at := s.start.Add(f.At)
			if !at.Before(windows[i].Start) && at.Before(windows[i].End) {
				windows[i].Faults++
			}
		}
	}
	r := &report.SoakReport{
		Rate: s.cfg.Rate, RateSource: s.info.rateSource, Capacity: s.info.capacity, Autovacuum: s.info.autovacuum,
		Duration: s.cfg.Soak.Duration, Window: s.cfg.Soak.Window, Windows: windows,
	}
	r.Failures = report.JudgeSoak(windows)
	if !invariantsPassed {
		r.Failures = append(r.Failures, report.SoakFailure{Rule: report.RuleInvariants, Detail: "the chaos invariants were violated (the table above)"})
	}
	r.Passed = len(r.Failures) == 0
	return r
}

func (s *soakSampler) stop() {
	s.cancel()
	<-s.done
}

// loadAverage returns the machine's 1-minute load average, 0 when it cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// cpuSample is a process's processor time as last read, and which process it was.
type cpuSample struct {
	pid int
	cpu time.Duration
}

// cpuSamples are the processes' CPU as last read, by process name.
type cpuSamples map[string]cpuSample

// advance reads name's CPU (now process pid) and returns what it used since the last
// read: 0 when the process changed (a restart loses one sample's share) or is down.
func (c cpuSamples) advance(name string, pid int) time.Duration {
	cpu, was := readCPU(pid), c[name]
	c[name] = cpuSample{pid, cpu}
	if was.pid != pid || pid <= 0 || cpu < was.cpu {
		return 0
	}
	return cpu - was.cpu
}

// clockTicks is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on Linux).
const clockTicks = 100

// readCPU returns the processor time (user and system) the process has used, 0 when it
// cannot be read (pid 0: down).
func readCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return statCPU(string(b))
}

// statCPU reads utime and stime (fields 14 and 15) from a /proc/<pid>/stat line. The
// command (field 2) is in parentheses and may hold spaces: the fields are counted after
// its last ')'.
func statCPU(stat string) time.Duration {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:]) // from field 3, the state
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// readRSS returns the process's VmRSS in bytes, 0 when it cannot be read (pid 0: down).
func readRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// sockets counts the process's open sockets (its /proc/<pid>/fd entries that link to a
// socket), -1 when they cannot be read.
func sockets(pid int) int {
	if pid <= 0 {
		return -1
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range entries {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// goroutines reads go_goroutines from the process's /metrics, -1 when it does not answer
// within two seconds (down, or frozen by a fault).
func goroutines(ctx context.Context, addr string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return int(v)
			}
		}
	}
	return -1
}
