// Package experiment is one chaos experiment from start to verdict: reset the stores,
// start the system, drive the load under the fault schedule, heal, wait for quiet,
// collect the snapshot, check it and write the reports; and compare, which runs the
// same experiment against the right design and the wrong ones.
package experiment

import (
	"context"
	"errors"
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

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/faults"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/load"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/report"
)

// ErrViolations is returned when a run finished and the checker found a violation.
var ErrViolations = errors.New("invariants violated")

// Run starts the system, loads it under the fault schedule, waits for quiet, checks
// every invariant and writes the reports. Progress goes to progress.
func Run(ctx context.Context, cfg config.Config, progress io.Writer) (*report.Result, error) {
	return run(ctx, cfg, progress, nil)
}

// run is Run, and with soak, a soak: it samples the system at the end of each window and
// adds the soak's windows and verdict to the result.
func run(ctx context.Context, cfg config.Config, progress io.Writer, soak *soakInfo) (*report.Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	res := &report.Result{Design: cfg.DesignName(), Config: cfg, Started: time.Now()}
	name := res.Started.Format("20060102-150405")
	if cfg.Design != "" {
		name += "-" + slug(cfg.Design)
	}
	res.ReportDir = filepath.Join(cfg.ReportRoot, name)
	if err := os.MkdirAll(filepath.Join(res.ReportDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	for _, svc := range harness.Services {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, svc)); err != nil {
			return nil, fmt.Errorf("service binary missing: %w (run make build)", err)
		}
	}
	say := func(format string, args ...any) { fmt.Fprintf(progress, "chaos: "+format+"\n", args...) }
	say("%s: %d orders at %g/s, %d faults of each kind, %d broker and %d Postgres outages, seed %d; report in %s",
		res.Design, cfg.Orders, cfg.Rate, cfg.FaultsPerKind, cfg.Outages, cfg.Outages, cfg.Seed, res.ReportDir)
	if cfg.Cluster {
		say("cluster: %d broker nodes killed, %d stopped for %v or more, %d Postgres failovers", cfg.NodeLosses, cfg.NodeLosses, cfg.NodeDown, cfg.Failovers)
	}

	stopPostgres, err := ownPostgres(ctx, &cfg, progress)
	if err != nil {
		return nil, err
	}
	// Stopped after the system (deferred before it), keeping its log with the run's.
	defer stopPostgres(filepath.Join(res.ReportDir, "logs"))

	var cluster *harness.Cluster
	if cfg.Cluster {
		say("starting the cluster: three RabbitMQ nodes, a primary and a synchronous standby for each of %s", strings.Join(config.ClusterServices, ", "))
		var err error
		if cluster, err = harness.StartCluster(ctx); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		// Stopped last (deferred first), after the services; also on an error or Ctrl-C.
		defer func() {
			if err := cluster.Close(); err != nil {
				say("stopping the cluster: %v", err)
			}
		}()
	}
	if err := harness.ResetStores(ctx, cfg, cluster); err != nil {
		return nil, err
	}
	var live atomic.Pointer[faults.Injector]
	sys, err := harness.Start(ctx, cfg, cluster, res.ReportDir, func(p *harness.Process, spec string) {
		if in := live.Load(); in != nil {
			in.FailpointFired(p, spec)
		}
	})
	if err != nil {
		return nil, err
	}
	defer sys.Stop()
	say("system up: %d processes, %d Toxiproxy links", len(sys.Procs), len(sys.Net.LinkNames()))

	books, err := stockBooks(ctx, sys, cfg)
	if err != nil {
		return nil, err
	}
	// The load reaches each ordering API through a link of its own (client-ordering, or
	// client-ordering-1 and -2), which the network faults strike like any other.
	var apis []string
	for _, name := range cfg.OrderingAPIs() {
		clientLink, err := sys.Net.AddLink("client-"+name, sys.Process(name).HTTPAddr)
		if err != nil {
			return nil, err
		}
		apis = append(apis, "http://"+clientLink)
	}
	customers := load.Plan(cfg, books, apis)
	msgs := faults.NewMessages(sys, cfg.Seed)
	defer msgs.Close()
	var procNames []string
	for _, p := range sys.Procs {
		procNames = append(procNames, p.Name)
	}
	in := faults.NewInjector(sys, msgs, faults.Schedule(cfg, procNames, sys.Net.LinkNames()))
	live.Store(in)

	loadCtx, endLoad := context.WithCancel(ctx)
	res.LoadStart = time.Now()
	liveness := startLiveness(ctx, sys, cfg)
	defer liveness.stop() // finish stops it first on the way to a verdict
	var sampler *soakSampler
	if soak != nil {
		sampler = startSoak(ctx, sys, cfg, *soak, res.LoadStart)
		defer sampler.stop()
	}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); in.Run(loadCtx, res.LoadStart) }()
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); showProgress(loadCtx, progress, sys, customers, in, cfg) }()

	history := customers.Run(ctx)
	res.LoadEnd = time.Now()
	endLoad()
	<-faultsDone
	<-progressDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	say("load done in %v; healing every fault", res.LoadEnd.Sub(res.LoadStart).Round(time.Second))
	if err := in.Heal(ctx); err != nil {
		say("heal: %v", err)
	}
	say("waiting for quiet (at most %v)", cfg.QuietTimeout)
	res.Quiet = waitQuiet(ctx, sys, cfg.QuietTimeout)
	say("%s after %v", res.Quiet.Reason, res.Quiet.Waited.Round(time.Second))
	sampled := liveness.finish()

	collectStart := time.Now()
	snap, err := collect(ctx, sys, msgs, history, cfg.Soak.On)
	if err != nil {
		return nil, fmt.Errorf("collect: %w", err)
	}
	collected := time.Since(collectStart)
	say("collected %d orders, %d notification records and %d emails in %v", len(snap.Orders), len(snap.Notifications), len(snap.Emails), collected.Round(time.Millisecond))
	for _, f := range in.FaultResults() {
		if f.Check != nil {
			snap.FaultChecks = append(snap.FaultChecks, f)
		}
	}
	snap.Faults, snap.Liveness = in.FaultResults(), sampled
	checkStart := time.Now()
	res.Verdicts = check.Check(snap)
	res.Violations = check.ViolationCount(res.Verdicts)
	res.Passed = check.Passed(res.Verdicts)
	checked := time.Since(checkStart)
	say("checked the invariants in %v", checked.Round(time.Millisecond))
	if sampler != nil {
		res.Soak = sampler.finish(ctx, snap, in.FaultResults(), res.Passed)
		res.Soak.Collect, res.Soak.Check = collected, checked
		res.Passed = res.Soak.Passed
	}
	res.Faults = in.FaultResults()
	res.FaultCounts = report.CountFaults(res.Faults)
	res.OutboxRecovery = check.Recoveries(sampled, res.Faults)
	if cfg.Outages > 0 {
		res.Budgets = cfg.Budgets()
		res.Outages = report.OutageReports(cfg, res.Faults, res.LoadStart)
	}
	res.Processes = sys.ProcessStats()
	res.DelayedSends = customers.Delayed.Load()
	res.Ops = report.SummarizeOps(history)
	res.Orders = report.SummarizeOrders(snap.Orders)
	res.Series = report.Series(res.LoadStart, res.LoadEnd, history, snap.Orders, snap.Emails)
	res.Posts = report.SummarizePosts(res.LoadStart, res.LoadEnd, history, res.Faults, snap.Orders, snap.Emails)
	report.AddClientRecovery(res.Faults, history, snap.Orders, snap.Emails)
	res.Finished = time.Now()
	writeStart := time.Now()
	if err := report.Write(res, snap); err != nil {
		return res, err
	}
	say("wrote the reports in %v; the run's end took %v from quiet", time.Since(writeStart).Round(time.Millisecond), time.Since(collectStart).Round(time.Millisecond))
	return res, nil
}

// ownPostgres starts a Postgres server of the run's own when cfg asks for one
// (-postgres own) and points cfg at it. stop copies the server's log into logDir, stops
// it and removes it; without -postgres own there is nothing to stop.
func ownPostgres(ctx context.Context, cfg *config.Config, progress io.Writer) (stop func(logDir string), err error) {
	if !cfg.OwnPostgres() {
		return func(string) {}, nil
	}
	own, err := harness.StartOwnPostgres(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres of the run's own: %w", err)
	}
	cfg.AdminURL = own.AdminURL()
	fmt.Fprintf(progress, "chaos: Postgres of the run's own at %s (the defaults: autovacuum on)\n", cfg.AdminURL)
	return func(logDir string) {
		if err := own.Close(logDir); err != nil {
			fmt.Fprintf(progress, "chaos: stopping the run's own Postgres: %v\n", err)
		}
	}, nil
}

// stockBooks reads the seeded catalogue and sets its stock: plenty of most titles, and
// two scarce ones (drawn from the seed) that run out during the load, so part of the
// orders are rejected and the rejection path is exercised as much as the happy one.
func stockBooks(ctx context.Context, sys *harness.System, cfg config.Config) ([]uuid.UUID, error) {
	inv := sys.ProcessesOf("inventory")[0]
	books, err := harness.GetAll[check.Book](ctx, "http://"+inv.HTTPAddr+"/books")
	if err != nil {
		return nil, fmt.Errorf("read the catalogue: %w", err)
	}
	if len(books) < 3 {
		return nil, fmt.Errorf("the catalogue has %d books; the contracts promise at least 8", len(books))
	}
	slices.SortFunc(books, func(a, b check.Book) int { return strings.Compare(a.ID.String(), b.ID.String()) })
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
		if err := harness.PutJSON(ctx, "http://"+inv.HTTPAddr+"/books/"+b.ID.String(), body); err != nil {
			return nil, fmt.Errorf("stock %s: %w", b.Title, err)
		}
	}
	return ids, nil
}

// showProgress prints one live line: orders sent and answered, the database's outcomes,
// faults so far. On a terminal it rewrites itself; elsewhere it prints every 10 seconds.
func showProgress(ctx context.Context, w io.Writer, sys *harness.System, customers *load.OrderLoad, in *faults.Injector, cfg config.Config) {
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
	total := len(in.Faults)
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
		if rows, err := sys.DBs["ordering"].Query(ctx, `SELECT status, count(*) FROM orders GROUP BY status`); err == nil {
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
			time.Since(start).Seconds(), customers.Sent.Load(), len(customers.Ops), customers.OK.Load(), customers.Rejected.Load(), customers.Unknown.Load(), customers.Failed.Load(), customers.InFlight.Load(),
			counts[check.StatusConfirmed], counts[check.StatusRejected], counts[check.StatusPending], in.StartedCount(), total)
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
