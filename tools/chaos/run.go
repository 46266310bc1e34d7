package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// result is one run: what was done, what was seen, what the checker said.
type result struct {
	Design       string         `json:"design"`
	Config       config         `json:"config"`
	ReportDir    string         `json:"report_dir"`
	Started      time.Time      `json:"started"`
	LoadStart    time.Time      `json:"load_start"`
	LoadEnd      time.Time      `json:"load_end"`
	Finished     time.Time      `json:"finished"`
	Ops          opStats        `json:"ops"`
	Orders       orderStats     `json:"orders"`
	Faults       []fault        `json:"faults"`
	FaultCounts  []faultCount   `json:"fault_counts"`
	Budgets      []budget       `json:"budgets,omitempty"` // the retry budgets the outages had to outlast
	Outages      []outageReport `json:"outages,omitempty"` // each outage's length against its budget
	Processes    []processStats `json:"processes"`
	Quiet        quiet          `json:"quiet"`
	Series       []point        `json:"series"`
	Verdicts     []verdict      `json:"verdicts"`
	Violations   int            `json:"violations"`
	Passed       bool           `json:"passed"`
	DelayedSends int64          `json:"delayed_sends"` // sends that waited for the in-flight cap
	Posts        postStats      `json:"posts"`         // every POST /orders attempt: accepted, shed, timed out (loadreport.go)
}

// runChaos starts the system, loads it under the fault schedule, waits for quiet, checks
// every invariant and writes the reports. Progress goes to progress.
func runChaos(ctx context.Context, cfg config, progress io.Writer) (*result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &result{Design: cfg.designName(), Config: cfg, Started: time.Now()}
	name := res.Started.Format("20060102-150405")
	if cfg.Design != "" {
		name += "-" + slug(cfg.Design)
	}
	res.ReportDir = filepath.Join(cfg.ReportRoot, name)
	if err := os.MkdirAll(filepath.Join(res.ReportDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	for _, svc := range services {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, svc)); err != nil {
			return nil, fmt.Errorf("service binary missing: %w (run make build)", err)
		}
	}
	say := func(format string, args ...any) { fmt.Fprintf(progress, "chaos: "+format+"\n", args...) }
	say("%s: %d orders at %g/s, %d faults of each kind, %d broker and %d Postgres outages, seed %d; report in %s",
		res.Design, cfg.Orders, cfg.Rate, cfg.FaultsPerKind, cfg.Outages, cfg.Outages, cfg.Seed, res.ReportDir)

	if err := resetStores(ctx, cfg); err != nil {
		return nil, err
	}
	var live atomic.Pointer[injector]
	sys, err := startSystem(ctx, cfg, res.ReportDir, func(p *process, spec string) {
		if in := live.Load(); in != nil {
			in.failpointFired(p, spec)
		}
	})
	if err != nil {
		return nil, err
	}
	defer sys.stop()
	say("system up: %d processes, %d Toxiproxy links", len(sys.procs), len(sys.net.linkNames()))

	books, err := stockBooks(ctx, sys, cfg)
	if err != nil {
		return nil, err
	}
	// The load reaches each ordering API through a link of its own (client-ordering, or
	// client-ordering-1 and -2), which the network faults strike like any other.
	var apis []string
	for _, name := range cfg.orderingAPIs() {
		clientLink, err := sys.net.addLink("client-"+name, sys.process(name).httpAddr)
		if err != nil {
			return nil, err
		}
		apis = append(apis, "http://"+clientLink)
	}
	load := planLoad(cfg, books, apis)
	msgs := newMessages(sys, cfg.Seed)
	defer msgs.close()
	var procNames []string
	for _, p := range sys.procs {
		procNames = append(procNames, p.name)
	}
	in := newInjector(sys, msgs, schedule(cfg, procNames, sys.net.linkNames()))
	live.Store(in)

	loadCtx, endLoad := context.WithCancel(ctx)
	res.LoadStart = time.Now()
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); in.run(loadCtx, res.LoadStart) }()
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); showProgress(loadCtx, progress, sys, load, in, cfg) }()

	history := load.run(ctx)
	res.LoadEnd = time.Now()
	endLoad()
	<-faultsDone
	<-progressDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	say("load done in %v; healing every fault", res.LoadEnd.Sub(res.LoadStart).Round(time.Second))
	if err := in.heal(ctx); err != nil {
		say("heal: %v", err)
	}
	say("waiting for quiet (at most %v)", cfg.QuietTimeout)
	res.Quiet = waitQuiet(ctx, sys, cfg.QuietTimeout)
	say("%s after %v", res.Quiet.Reason, res.Quiet.Waited.Round(time.Second))

	snap, err := collect(ctx, sys, msgs, history)
	if err != nil {
		return nil, fmt.Errorf("collect: %w", err)
	}
	for _, f := range in.faultResults() {
		if f.Check != nil {
			snap.FaultChecks = append(snap.FaultChecks, f)
		}
	}
	res.Verdicts = check(snap)
	res.Violations = violationCount(res.Verdicts)
	res.Passed = passed(res.Verdicts)
	res.Faults = in.faultResults()
	res.FaultCounts = countFaults(res.Faults)
	if cfg.Outages > 0 {
		res.Budgets = cfg.budgets()
		res.Outages = outageReports(cfg, res.Faults, res.LoadStart)
	}
	res.Processes = sys.processStats()
	res.DelayedSends = load.delayed.Load()
	res.Ops = summarizeOps(history)
	res.Orders = summarizeOrders(snap.Orders)
	res.Series = series(res.LoadStart, res.LoadEnd, history, snap.Orders, snap.Emails)
	res.Posts = summarizePosts(res.LoadStart, res.LoadEnd, history, res.Faults, snap.Orders, snap.Emails)
	res.Finished = time.Now()
	if err := writeReports(res, snap); err != nil {
		return res, err
	}
	return res, nil
}

// stockBooks reads the seeded catalogue and sets its stock: plenty of most titles, and
// two scarce ones (drawn from the seed) that run out during the load, so part of the
// orders are rejected and the rejection path is exercised as much as the happy one.
func stockBooks(ctx context.Context, sys *system, cfg config) ([]uuid.UUID, error) {
	inv := sys.processesOf("inventory")[0]
	books, err := getAll[book](ctx, "http://"+inv.httpAddr+"/books")
	if err != nil {
		return nil, fmt.Errorf("read the catalogue: %w", err)
	}
	if len(books) < 3 {
		return nil, fmt.Errorf("the catalogue has %d books; the contracts promise at least 8", len(books))
	}
	slices.SortFunc(books, func(a, b book) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x73746f636b)) // "stock"
	scarce := map[int]bool{}
	for len(scarce) < 2 {
		scarce[rng.IntN(len(books))] = true
	}
	ids := make([]uuid.UUID, len(books))
	for i, b := range books {
		ids[i] = b.ID
		onHand := 3 * cfg.Orders // expected demand per title is about cfg.Orders/2
		if scarce[i] {
			onHand = max(5, cfg.Orders/10)
		}
		body := map[string]any{"title": b.Title, "on_hand": onHand}
		if err := putJSON(ctx, "http://"+inv.httpAddr+"/books/"+b.ID.String(), body); err != nil {
			return nil, fmt.Errorf("stock %s: %w", b.Title, err)
		}
	}
	return ids, nil
}

// showProgress prints one live line: orders sent and answered, the database's outcomes,
// faults so far. On a terminal it rewrites itself; elsewhere it prints every 10 seconds.
func showProgress(ctx context.Context, w io.Writer, sys *system, load *orderLoad, in *injector, cfg config) {
	if !cfg.Progress {
		return
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	every := time.Second
	if !tty {
		every = 10 * time.Second
	}
	start := time.Now()
	total := len(in.faults)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if tty {
				fmt.Fprintln(w)
			}
			return
		case <-t.C:
		}
		counts := map[string]int{}
		if rows, err := sys.dbs["ordering"].Query(ctx, `SELECT status, count(*) FROM orders GROUP BY status`); err == nil {
			for rows.Next() {
				var s string
				var n int
				if rows.Scan(&s, &n) == nil {
					counts[s] = n
				}
			}
			rows.Close()
		}
		line := fmt.Sprintf("[%4.0fs] sent %d/%d  ok %d  shed %d  unknown %d  failed %d  in flight %d | confirmed %d  rejected %d  pending %d | faults %d/%d",
			time.Since(start).Seconds(), load.sent.Load(), len(load.ops), load.ok.Load(), load.rejected.Load(), load.unknown.Load(), load.failed.Load(), load.inFlight.Load(),
			counts[statusConfirmed], counts[statusRejected], counts[statusPending], in.startedCount(), total)
		if tty {
			fmt.Fprintf(w, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(w, line)
		}
	}
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
				b.WriteByte('-')
			}
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
