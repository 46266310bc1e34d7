package experiment

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/faults"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/report"
)

// The smoke tests run the real thing, small: the four service binaries built from this
// repository, real Postgres and RabbitMQ, every kind of fault, and the checker. They are
// what `make test` and CI run; `make chaos` is the same harness, bigger.

// buildServices builds the four binaries into a temporary directory, as `make build`
// does. A service that does not build (or does not exist yet) fails the test: a chaos
// run of three services would prove nothing about the fourth.
func buildServices(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() { builtDir, builtErr = build() })
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtDir
}

// The binaries are built once for every test of the package, into a directory TestMain
// removes.
var (
	builtOnce sync.Once
	builtDir  string
	builtErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

func build() (string, error) {
	dir, err := os.MkdirTemp("", "chaos-bin-")
	if err != nil {
		return "", err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(harness.Services))
	out := make([][]byte, len(harness.Services))
	for i, svc := range harness.Services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append(append([]string{"build", "-trimpath"}, testenv.BuildFlags()...), "-o", filepath.Join(dir, svc), "./cmd/"+svc)
			cmd := exec.Command("go", args...)
			cmd.Dir = filepath.Join("..", "..", "..", "..", "services", svc)
			cmd.Env = append(cmd.Environ(), testenv.BuildEnv()...)
			out[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("build %s: %w\n%s", harness.Services[i], err, out[i]))
		}
	}
	return dir, errors.Join(failed...)
}

// smokeConfig is a small run on its own vhost and databases (named after the vhost), so
// it can run beside developers' systems and other tests.
func smokeConfig(t *testing.T, bin string) config.Config {
	t.Helper()
	testenv.Database(t, "chaos") // skips (fails in CI) when Postgres is down
	amqpURL := testenv.VHost(t)  // the same for RabbitMQ; the run recreates the vhost
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default
	cfg.Prefix = strings.TrimPrefix(u.Path, "/")
	cfg.AdminURL = testenv.AdminURL()
	cfg.AMQPURL = testenv.AMQPBase()
	cfg.ManagementURL = testenv.ManagementURL()
	cfg.BinDir = bin
	cfg.ReportRoot = t.TempDir()
	if dir := os.Getenv("CHAOS_SMOKE_REPORTS"); dir != "" {
		cfg.ReportRoot = dir // kept after the test, logs and all
	}
	cfg.Progress = false
	cfg.QuietTimeout = 90 * time.Second
	cfg.Outages = 0 // the default's ten outages of 10-15 s do not fit a smoke run; a test adds its own
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := harness.DropStores(ctx, cfg); err != nil {
			t.Logf("drop the run's stores: %v", err)
		}
	})
	return cfg
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// About 300 orders under every kind of fault, and the default design keeps every
// invariant. The smoke test of the whole harness.
func TestTheDefaultDesignKeepsEveryInvariantUnderEveryKindOfFault(t *testing.T) {
	bin := buildServices(t)
	cfg := smokeConfig(t, bin)
	smokeFaults(&cfg)

	res, err := Run(t.Context(), cfg, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	noRaces(t, res.ReportDir)
	var summary strings.Builder
	report.PrintSummary(&summary, res)
	t.Log(summary.String())

	if !res.Passed || res.Violations != 0 {
		t.Errorf("the default design broke %d invariants; see %s", res.Violations, res.ReportDir)
	}
	if res.Ops.Sent != cfg.Orders || res.Ops.OK == 0 {
		t.Errorf("sent %d of %d orders, %d ok", res.Ops.Sent, cfg.Orders, res.Ops.OK)
	}
	if res.Orders.Confirmed == 0 || res.Orders.Rejected == 0 {
		t.Errorf("want both outcomes exercised: %d confirmed, %d rejected", res.Orders.Confirmed, res.Orders.Rejected)
	}
	hit := map[string]int{}
	for _, c := range res.FaultCounts {
		hit[c.Kind] = c.Fired
	}
	for _, kind := range check.FaultKinds {
		if hit[kind] == 0 && !(kind == check.FaultConsumerTimeout && skippedForItsBroker(res.Faults, kind)) {
			t.Errorf("no %s fault hit the system (counts %+v)", kind, res.FaultCounts)
		}
	}
	// Every failpoint name was armed in a process during the load (with fewer faults than
	// names, one of them never is).
	if missing := unarmedFailpoints(res.Faults); len(missing) > 0 {
		t.Errorf("failpoints never armed: %v", missing)
	}
	for _, f := range res.Faults {
		if check.IsHeavy(f.Kind) {
			t.Logf("%s %d on %s: fired %v, %s", f.Kind, f.ID, f.Target, f.Fired, f.Note)
		}
	}
	for _, o := range res.Outages {
		if o.Required && !o.Outlasted {
			t.Errorf("%s at %v lasted %v, not longer than the %s budget (%v)", o.Kind, o.At, o.Length, o.Budget, o.BudgetMax)
		}
	}
	fired := map[string]int{}
	for _, f := range res.Faults {
		if f.Kind == check.FaultFailpoint && f.Fired {
			fired[strings.SplitN(f.Detail, "=", 2)[0]]++
		}
	}
	t.Logf("failpoints that crashed a process: %v (of %v)", fired, contracts.Failpoints)
	var crashes int
	for _, p := range res.Processes {
		crashes += p.Kills + p.FailpointCrashes
	}
	if crashes == 0 {
		t.Error("no process was killed: the run proved nothing about crashes")
	}
}

// smokeFaults sets the smoke run's load and faults: enough faults of each kind that every
// failpoint name of the contracts is armed once and every poison kind injected once, one
// of each heavy kind, and one broker and one Postgres outage of 3-4.5 s: still longer
// than the relay's 3 attempts (up to 2.6 s of the old relay's backoff) and the
// consumers' 50 deliveries (up to 2.5 s of the old consumer's shrunk backoff).
func smokeFaults(cfg *config.Config) {
	cfg.Orders, cfg.Rate = 400, 15
	cfg.FaultsPerKind = max(len(contracts.Failpoints), len(faults.PoisonKinds))
	cfg.HeavyFaults = 1
	cfg.Outages, cfg.OutageLength = 1, 3*time.Second
}

// unarmedFailpoints lists the failpoint names of the contracts that no failpoint fault
// of fs armed (started).
func unarmedFailpoints(fs []check.Fault) []string {
	armed := map[string]bool{}
	for _, f := range fs {
		if f.Kind == check.FaultFailpoint && !f.Start.IsZero() {
			armed[strings.SplitN(f.Detail, "=", 2)[0]] = true
		}
	}
	var missing []string
	for _, name := range contracts.Failpoints {
		if !armed[name] {
			missing = append(missing, name)
		}
	}
	return missing
}

// The run's default processes and their links, as the smoke run has them.
var (
	testProcesses = []string{"emailprovider", "inventory-1", "inventory-2", "notification", "ordering", "ordering-relay"}
	smokeLinks    = []string{"client-ordering", "emailprovider-postgres", "inventory-1-postgres", "inventory-1-rabbitmq",
		"inventory-2-postgres", "inventory-2-rabbitmq", "notification-emailprovider", "notification-postgres",
		"notification-rabbitmq", "ordering-postgres", "ordering-rabbitmq", "ordering-relay-postgres", "ordering-relay-rabbitmq"}
)

// The smoke run's schedule arms every failpoint name and has every kind of fault, every
// poison kind and both outages: what the smoke run asserts about the run, checked here
// without running it.
func TestTheSmokeScheduleCoversEveryFailpointKindAndPoison(t *testing.T) {
	cfg := config.Default
	smokeFaults(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	scheduled := faults.Schedule(cfg, testProcesses, smokeLinks)
	for i := range scheduled {
		scheduled[i].Start = time.Now() // as if every fault had started
	}
	if missing := unarmedFailpoints(scheduled); len(missing) > 0 {
		t.Errorf("the smoke run never arms %v", missing)
	}
	kinds := map[string]int{}
	poison := map[string]bool{}
	for _, f := range scheduled {
		kinds[f.Kind]++
		if f.Kind == check.FaultPoison {
			poison[f.Detail] = true
		}
	}
	for _, k := range check.FaultKinds {
		if kinds[k] == 0 {
			t.Errorf("the smoke run has no %s fault", k)
		}
	}
	for _, k := range faults.PoisonKinds {
		if !poison[k] {
			t.Errorf("the smoke run injects no %s poison", k)
		}
	}
}

// TestChaosCatchesNaiveConsumer: the same harness, a short run, the naive inventory
// consumer. Duplicate deliveries reserve twice, and the checker must say so.
func TestChaosCatchesNaiveConsumer(t *testing.T) {
	bin := buildServices(t)
	cfg := smokeConfig(t, bin)
	cfg.Orders, cfg.Rate, cfg.FaultsPerKind = 150, 15, 4
	cfg.HeavyFaults = 0 // crashes and cut links redeliver enough; the heavy kinds only lengthen the run
	cfg.InventoryStrategy = "naive"

	res, err := Run(t.Context(), cfg, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	noRaces(t, res.ReportDir)
	var summary strings.Builder
	report.PrintSummary(&summary, res)
	t.Log(summary.String())
	if res.Passed || res.Violations == 0 {
		t.Fatal("the naive consumer passed the checker: the harness cannot tell right from wrong")
	}
	if v := res.Verdicts[2]; v.Passed || v.Counts[check.ReservedMismatch] == 0 {
		t.Errorf("invariant 3 should find double reservations, got %+v", v)
	}
}

// A queue_unbound fault on notification.stock-events under traffic: the harness declares
// the queue again without its bindings, as a consumer killed between its declare and its
// binds leaves it, and keeps notification down 3-6 s while inventory publishes stock
// events. The default relay sends the queue a copy of its own under a key it binds, a
// copy that comes back while the queue is unbound is sent again, and every invariant
// holds. (The smoke run has its queue_unbound too, but it often waits for the
// other queue faults until the load is over.)
func TestTheDefaultDesignBindsAQueueLeftUnboundBeforePublishingPastIt(t *testing.T) {
	res := runQueueUnbound(t, "bindings")
	if !res.Passed || res.Violations != 0 {
		t.Errorf("the default design broke %d invariants; see %s", res.Violations, res.ReportDir)
	}
	for _, f := range res.Faults {
		if f.Kind == check.FaultQueueUnbound && (f.Check == nil || !f.Check.Checked) {
			t.Errorf("queue_unbound %d was not checked: %s %+v", f.ID, f.Note, f.Check)
		}
	}
}

// The same fault with a relay that trusts mandatory: it publishes the stock events to
// ordering.stock-events alone while notification's queue waits unbound, and the fault's
// own check must say so. This is the window make chaos once found by a lucky kill.
func TestChaosCatchesARelayThatTrustsMandatoryWithAQueueLeftUnbound(t *testing.T) {
	res := runQueueUnbound(t, "mandatory")
	if res.Passed || res.Violations == 0 {
		t.Fatal("a relay that trusts mandatory passed the checker under a queue_unbound fault")
	}
	for _, f := range res.Faults {
		if f.Kind != check.FaultQueueUnbound {
			continue
		}
		if f.Check == nil || f.Check.Violation != check.QueueLeftUnbound {
			t.Errorf("queue_unbound %d did not catch the design: %s %+v", f.ID, f.Note, f.Check)
		}
	}
}

// runQueueUnbound runs a short load whose only heavy fault is one queue_unbound, on
// notification.stock-events within the load, with RELAY_QUEUE_CHECK=queueCheck.
func runQueueUnbound(t *testing.T, queueCheck string) *report.Result {
	t.Helper()
	bin := buildServices(t)
	cfg := smokeConfig(t, bin)
	cfg.Orders, cfg.Rate, cfg.FaultsPerKind, cfg.HeavyFaults = 300, 15, 2, 1
	cfg.HeavyKinds = []string{check.FaultQueueUnbound}
	cfg.RelayQueueCheck = queueCheck
	res, err := Run(t.Context(), cfg, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	noRaces(t, res.ReportDir)
	var summary strings.Builder
	report.PrintSummary(&summary, res)
	t.Log(summary.String())
	unbound := 0
	for _, f := range res.Faults {
		if f.Kind == check.FaultQueueUnbound {
			unbound++
			t.Logf("%s %d on %s at %v: fired %v, %s; check %+v", f.Kind, f.ID, f.Target, f.Start.Sub(res.LoadStart).Round(100*time.Millisecond), f.Fired, f.Note, f.Check)
		}
	}
	if unbound != 1 {
		t.Fatalf("the run had %d queue_unbound faults, want 1", unbound)
	}
	return res
}

// noRaces fails the test if the race detector reported a data race in any process of the
// run (RACE=1 builds the binaries with -race). The supervisor restarts a process that
// exits, so a race shows only in its log.
func noRaces(t *testing.T, reportDir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(reportDir, "logs", "*.log"))
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Error(err)
			continue
		}
		if testenv.RaceReported(string(b)) {
			t.Errorf("the race detector found a data race in %s", name)
		}
	}
}

// skippedForItsBroker reports whether every fault of kind was skipped because the broker
// cannot take it: consumer_timeout needs a per-queue consumer timeout (RabbitMQ 3.12 and
// later), and the run leaves an older broker's node-wide setting alone.
func skippedForItsBroker(faults []check.Fault, kind string) bool {
	n := 0
	for _, f := range faults {
		if f.Kind != kind {
			continue
		}
		n++
		if !strings.HasPrefix(f.Note, "skipped: RabbitMQ 3.") {
			return false
		}
	}
	return n > 0
}
