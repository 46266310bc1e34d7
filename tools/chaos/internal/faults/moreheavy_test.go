package faults

import (
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// The new heavy kinds come as few as the other heavy ones, and each cycles through its
// targets: both services' roles, every relay process.
func TestTheMoreHeavyKindsAreScheduledFewAndCycleThroughTheirTargets(t *testing.T) {
	cfg := config.Default
	cfg.Orders, cfg.FaultsPerKind, cfg.Outages = 2000, 80, 2 // 4 of each heavy kind
	targets := map[string]map[string]bool{}
	count := map[string]int{}
	for _, f := range Schedule(cfg, testProcesses, smokeLinks) {
		switch f.Kind {
		case check.FaultExchangeDeleted, check.FaultSessionKilled, check.FaultHalfOpen, check.FaultHopeless, check.FaultLateCommit:
		default:
			continue
		}
		count[f.Kind]++
		if targets[f.Kind] == nil {
			targets[f.Kind] = map[string]bool{}
		}
		targets[f.Kind][f.Target] = true
	}
	want := map[string][]string{
		check.FaultExchangeDeleted: {contracts.Exchange},
		check.FaultSessionKilled:   {"inventory", "ordering"},
		check.FaultHalfOpen:        {"inventory-1", "inventory-2", "ordering", "ordering-relay"},
		check.FaultHopeless:        {contracts.QueueNotificationStockEvents},
		check.FaultLateCommit:      {"inventory-1", "inventory-2"},
	}
	for kind, ts := range want {
		if count[kind] != cfg.HeavyFaultsEach() {
			t.Errorf("%s: %d faults, want %d", kind, count[kind], cfg.HeavyFaultsEach())
		}
		for _, target := range ts {
			if !targets[kind][target] {
				t.Errorf("%s never targets %s: %v", kind, target, targets[kind])
			}
		}
		if len(targets[kind]) != len(ts) {
			t.Errorf("%s targets %v, want %v", kind, targets[kind], ts)
		}
	}
}

// A hopeless message is a valid event of its own: it decodes as the consumer decodes
// it, under its new id, for its new order, to the refused recipient, with nothing else
// of the original changed.
func TestAHopelessMessageIsAValidEventOfItsOwn(t *testing.T) {
	original, err := event.New("bookstore/inventory", contracts.StockRejected, "0190a0b0-0000-7000-8000-000000000001", 3, contracts.StockRejectedData{
		OrderID: uuid.MustParse("0190a0b0-0000-7000-8000-000000000001"), CustomerEmail: "op-7@chaos.example",
		Lines: []contracts.Line{{BookID: uuid.MustParse("0190a0b0-0000-7000-8000-0000000000b1"), Quantity: 2}}, Reason: "out of stock",
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(original)
	if err != nil {
		t.Fatal(err)
	}
	id, order := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	body, typ, err := hopelessBody(string(raw), id, order, hopelessRecipient(4))
	if err != nil {
		t.Fatal(err)
	}
	env, err := event.Decode(body, contracts.StockRejected)
	if err != nil {
		t.Fatalf("the hopeless message does not decode: %v\n%s", err, body)
	}
	var d contracts.StockRejectedData
	if err := env.DecodeData(&d); err != nil {
		t.Fatal(err)
	}
	if typ != contracts.StockRejected || env.ID != id || env.Subject != order || d.OrderID.String() != order || d.CustomerEmail != hopelessRecipient(4) {
		t.Errorf("type %s id %s subject %s data %+v", typ, env.ID, env.Subject, d)
	}
	if contracts.AddressProblem(d.CustomerEmail) != "" {
		t.Errorf("recipient %s: %s", d.CustomerEmail, contracts.AddressProblem(d.CustomerEmail))
	}
	if env.Source != original.Source || env.Sequence != original.Sequence || d.Reason != "out of stock" || len(d.Lines) != 1 {
		t.Errorf("changed more than its identity: %+v %+v", env, d)
	}
	if _, _, err := hopelessBody(strings.Replace(string(raw), contracts.StockRejected, contracts.StockReleased, 1), id, order, "x@chaos.example"); err == nil {
		t.Error("a stock-released event taken: its email waits for a confirmation that never comes")
	}
}

// queue_full compares only types the capped queue does not take and that do not depend
// on its held consumers; a queue whose consumer is ordering (the API) leaves none.
func TestQueueFullComparesOnlyTypesItsQueueNeitherRefusesNorHoldsUp(t *testing.T) {
	got := otherTypes(contracts.QueueNotificationStockEvents)
	if len(got) == 0 {
		t.Fatal("no other type for notification's queue")
	}
	for _, key := range got {
		if !strings.HasPrefix(key, "ordering.") {
			t.Errorf("%s compared while notification's queue is full: inventory's stock events are all bound to it", key)
		}
	}
	if got := otherTypes(contracts.QueueOrderingStockEvents); len(got) != 0 {
		t.Errorf("ordering's queue: %v, want none (its consumer is the API's process)", got)
	}
	for _, key := range otherTypes(contracts.QueueInventoryOrderPlaced) {
		if strings.HasPrefix(key, "inventory.") {
			t.Errorf("%s compared while inventory is held down", key)
		}
	}
}

// session_killed reads the processes' request lines: a 500 counts, a 503 does not.
func TestSessionKilledTakesA500FromTheRequestLog(t *testing.T) {
	line := `{"time":"2026-12-04T22:24:26Z","level":"ERROR","msg":"http request","service":"ordering","method":"POST","path":"/orders","status":500,"duration_ms":4}`
	if path, ok := answered500(line); !ok || path != "/orders" {
		t.Errorf("answered500 = %q, %v; want /orders, true", path, ok)
	}
	for _, other := range []string{
		strings.Replace(line, `"status":500`, `"status":503`, 1),
		strings.Replace(line, `"http request"`, `"not ready"`, 1),
		"=== chaos 2026-12-04T22:24:28Z: exited: <nil>",
	} {
		if _, ok := answered500(other); ok {
			t.Errorf("taken for a 500: %s", other)
		}
	}
}

// smokeAndDefaultRuns are the smoke run's configuration and make chaos's, each with the
// number of faults of each heavy kind it schedules.
func smokeAndDefaultRuns() []struct {
	orders int
	cfg    config.Config
	each   int
} {
	run := func(orders int, rate float64, perKind, heavy, outages int) config.Config {
		cfg := config.Default
		cfg.Orders, cfg.Rate, cfg.FaultsPerKind, cfg.HeavyFaults, cfg.Outages = orders, rate, perKind, heavy, outages
		cfg.OutageLength = 3 * time.Second
		return cfg
	}
	return []struct {
		orders int
		cfg    config.Config
		each   int
	}{
		{400, run(400, 15, 12, 1, 1), 1},     // the smoke run's
		{5000, run(5000, 20, 100, -1, 5), 5}, // make chaos's
	}
}

// ofKindAndFirstOf returns the faults of kind in fs, and when the first fault of any of
// the others kinds comes (span when none does).
func ofKindAndFirstOf(fs []check.Fault, span time.Duration, kind string, others ...string) ([]check.Fault, time.Duration) {
	var of []check.Fault
	first := span
	for _, f := range fs {
		switch {
		case f.Kind == kind:
			of = append(of, f)
		case slices.Contains(others, f.Kind):
			first = min(first, f.At)
		}
	}
	return of, first
}

// exchange_deleted takes reserved slots in the load, each clear of the outages for its
// usual recovery: a run of one fault per kind deletes the exchange before any other
// topology fault can take the turn.
func TestTheExchangeIsDeletedInReservedSlotsEarlyInTheLoad(t *testing.T) {
	for _, tc := range smokeAndDefaultRuns() {
		span, fs := tc.cfg.LoadDuration(), Schedule(tc.cfg, testProcesses, smokeLinks)
		ex, firstOther := ofKindAndFirstOf(fs, span, check.FaultExchangeDeleted,
			check.FaultQueueDeleted, check.FaultLateConsumer, check.FaultQueueUnbound, check.FaultQueueFull, check.FaultConsumerTimeout, check.FaultHopeless)
		if len(ex) != tc.each {
			t.Fatalf("%d orders: %d exchange_deleted faults, want %d", tc.orders, len(ex), tc.each)
		}
		if ex[0].At >= firstOther {
			t.Errorf("%d orders: the first exchange_deleted at %v, not before every other topology fault (the first at %v)", tc.orders, ex[0].At, firstOther)
		}
		for _, f := range ex {
			if f.At > span-config.FaultLead(span) {
				t.Errorf("%d orders: exchange_deleted at %v of a %v load, past its end", tc.orders, f.At, span)
			}
			for _, o := range fs {
				if check.IsOutage(o.Kind) && f.At < o.At+o.Duration && o.At < f.At+exchangeBusy {
					t.Errorf("%d orders: exchange_deleted at %v overlaps %s at %v", tc.orders, f.At, o.Kind, o.At)
				}
			}
		}
	}
}

// An urgent fault waiting for the topology's turn goes before every fault that waited
// longer, and the turn is held by one fault at a time.
func TestAnUrgentTopologyFaultTakesTheNextTurn(t *testing.T) {
	tr := newTurns()
	tr.take(false) // the turn of a queue fault in progress
	order := make(chan string, 3)
	waiting := func(n int) {
		for {
			tr.mu.Lock()
			w := tr.urgent
			tr.mu.Unlock()
			if w == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	go func() { tr.take(false); order <- "queue fault"; tr.give() }()
	go func() { tr.take(true); order <- "exchange_deleted"; tr.give() }()
	waiting(1)
	tr.give()
	if first := <-order; first != "exchange_deleted" {
		t.Errorf("%s took the turn first, want exchange_deleted", first)
	}
	if second := <-order; second != "queue fault" {
		t.Errorf("then %s, want the queue fault", second)
	}
}

// The default run's ten outages leave gaps of 13-25 s, and the new heavy kinds are
// scheduled into them for what their recovery takes: most of each kind lands within the
// load, not after its last outage at its very end, where each of them once landed.
func TestTheDefaultRunSchedulesTheMoreHeavyKindsWithinTheLoad(t *testing.T) {
	cfg := config.Default
	span := cfg.LoadDuration()
	within, all := map[string]int{}, map[string]int{}
	for _, f := range Schedule(cfg, testProcesses, smokeLinks) {
		switch f.Kind {
		case check.FaultExchangeDeleted, check.FaultSessionKilled, check.FaultHalfOpen, check.FaultHopeless:
		default:
			continue
		}
		all[f.Kind]++
		if f.At < span*4/5 {
			within[f.Kind]++
		}
	}
	for kind, n := range all {
		if within[kind] < n-1 {
			t.Errorf("%s: %d of %d faults in the first four fifths of the %v load", kind, within[kind], n, span)
		}
	}
	if len(all) != 4 {
		t.Errorf("kinds scheduled: %v", all)
	}
}

// What a measuring fault holds is given up once its bound has passed, last taken first,
// and only once, however often it looks or ends.
func TestAMeasuringFaultGivesUpWhatItHoldsAtItsBound(t *testing.T) {
	var b bounded
	var order []string
	b.hold(func() { order = append(order, "topology") })
	b.hold(func() { order = append(order, "targets") })
	b.check() // no bound yet
	b.from(time.Now(), time.Hour)
	b.check()
	if len(order) != 0 {
		t.Fatalf("given up before the bound: %v", order)
	}
	b.from(time.Now().Add(-time.Second), 0)
	b.check()
	b.check()
	b.done()
	if strings.Join(order, ",") != "targets,topology" {
		t.Errorf("given up %v, want targets then topology, once each", order)
	}
}

// A queue_full on notification's queue compares ordering's events, so it keeps faults off
// ordering's processes, their links and every publisher while it measures: in a default
// run the old check blamed the cap for ordering being killed eight times under it
// ("other types published at 0.31 of their rate before").
func TestQueueFullKeepsFaultsOffTheProducersWhoseRateItCompares(t *testing.T) {
	sys := &harness.System{}
	for _, p := range []struct{ name, service string }{{"ordering", "ordering"}, {"ordering-relay", "ordering"},
		{"inventory-1", "inventory"}, {"notification", "notification"}, {"emailprovider", "emailprovider"}} {
		sys.Procs = append(sys.Procs, &harness.Process{Name: p.name, Service: p.service})
	}
	got := otherProducers(sys, contracts.QueueNotificationStockEvents)
	want := []string{everyPublisher, "ordering", "ordering-postgres", "ordering-rabbitmq", "client-ordering",
		"ordering-relay", "ordering-relay-postgres", "ordering-relay-rabbitmq", "client-ordering-relay"}
	if !slices.Equal(got, want) {
		t.Errorf("otherProducers = %v, want %v", got, want)
	}
}

// late_commit's process restarts armed and must then be handed an order: it starts at
// least lateCommitArming before the load's end, in runs as short as the smoke run's
// (where no moment that early is clear of the outages) and in default runs.
func TestALateCommitStartsWhileTheLoadStillHasOrdersToHandIt(t *testing.T) {
	short := config.Default
	short.Orders, short.Rate, short.FaultsPerKind, short.HeavyFaults = 400, 15, 7, 1
	short.Outages, short.OutageLength = 1, 3*time.Second
	long := config.Default
	long.Orders, long.FaultsPerKind, long.Outages = 2000, 80, 2
	for name, cfg := range map[string]config.Config{"short": short, "long": long} {
		span := cfg.LoadDuration()
		latest := span - config.FaultLead(span) - lateCommitArming
		for seed := range uint64(40) {
			cfg.Seed = seed + 1
			for _, f := range Schedule(cfg, testProcesses, smokeLinks) {
				if f.Kind == check.FaultLateCommit && f.At > latest {
					t.Errorf("%s run, seed %d: late_commit at %v of a %v load, after %v", name, cfg.Seed, f.At, span, latest)
				}
			}
		}
	}
}

// Two faults that each need a process to themselves take turns. In CI a half_open on
// inventory-1 (at 24.5 s of the smoke run's schedule) struck inside relay_twin's check of
// inventory-1 (from 21.4 s, held until 30 s): both protected it, neither waited for the
// other, the live relay lost its lock with its half-closed session, the twin took the
// lock, and the check blamed the twin for publishing.
func TestTwoFaultsThatNeedAProcessToThemselvesTakeTurns(t *testing.T) {
	g := newGuard()
	if !g.protect(time.Second, "inventory-1", "inventory-1-postgres") {
		t.Fatal("nothing held inventory-1, yet it could not be protected")
	}
	if g.protect(10*time.Millisecond, "inventory-1", "inventory-1-postgres") {
		t.Fatal("a second fault had inventory-1 to itself while the first still did")
	}
	// The refused fault left nothing protected behind it: once the first gives it up, a
	// fault waiting for it gets it.
	got := make(chan bool, 1)
	go func() { got <- g.protect(time.Minute, "inventory-1", "inventory-2") }()
	g.unprotect("inventory-1", "inventory-1-postgres")
	if !<-got {
		t.Fatal("a fault waiting for inventory-1 did not get it once the first gave it up")
	}
	g.unprotect("inventory-1", "inventory-2")
	entered := make(chan struct{})
	go func() { g.enter("inventory-1"); close(entered) }()
	<-entered // a fault that strikes inventory-1 may now: nothing protects it
	g.leave("inventory-1")
}

// A relay twin is checked only where it could have published: in `make chaos-compare`
// both twins fell inside a broker_alarm (every publishing connection blocked), the
// wrong design's twin published nothing, and its run passed. The twin keeps alarms off
// while it runs, and a twin that published nothing while its service relayed nothing
// either proves nothing.
func TestARelayTwinIsCheckedOnlyWhereItCouldHavePublished(t *testing.T) {
	g := newGuard()
	p := &harness.Process{Name: "inventory-2", Service: "inventory"}
	if !g.protect(time.Second, twinTargets(p)...) {
		t.Fatal("nothing held inventory-2, yet the twin could not protect it")
	}
	if g.protected[everyPublisher] == 0 {
		t.Error("a broker_alarm may block every publisher while the twin runs")
	}
	for _, c := range []struct {
		published, relayed int
		checked            bool
		violation          string
	}{
		{0, 0, false, ""},                   // an alarm, an outage: nobody could publish
		{0, 40, true, ""},                   // the service relayed; the twin refused
		{11, 40, true, check.TwinPublished}, // the twin relayed beside the live relay
	} {
		got := twinCheck(p, "inventory-2", c.published, c.relayed, 6*time.Second, "503")
		if got.Checked != c.checked || got.Violation != c.violation {
			t.Errorf("twin published %d, service relayed %d: checked %v violation %q (%s), want %v %q",
				c.published, c.relayed, got.Checked, got.Violation, got.Detail, c.checked, c.violation)
		}
	}
}

// A failpoint that has not fired gives its process up after its first window to a
// late_commit waiting for it. In CI a before-release-commit failpoint (which fires only
// on a cancellation's release) held inventory-2 for its three windows of 8 s, the
// late_commit queued behind it began 1.5 s before the load's end, and no order came to
// hold: the smoke run missed the kind.
func TestAFailpointThatHasNotFiredGivesItsProcessToALateCommitAfterOneWindow(t *testing.T) {
	p := &harness.Process{Name: "inventory-2", Service: "inventory"}
	in := NewInjector(&harness.System{Procs: []*harness.Process{p}}, nil, []check.Fault{
		{ID: 1, Kind: check.FaultFailpoint, Target: p.Name, Duration: 300 * time.Millisecond, Detail: "inventory/before-release-commit=p(0.5)*crash"},
	})
	fp := &in.Faults[0]
	done := make(chan struct{})
	go func() { defer close(done); in.failpoint(t.Context(), fp) }()
	for in.FaultResults()[0].Start.IsZero() {
		runtime.Gosched()
	}
	release := in.takeForHold(p.Name) // the late commit, while the failpoint's first window runs
	defer release()
	<-done
	if got := in.FaultResults()[0]; got.Fired || !strings.Contains(got.Note, "in 1 of its 3 windows") {
		t.Errorf("the failpoint held its process while a late commit waited for it: %q (fired %v)", got.Note, got.Fired)
	}
}

// The first relay_twin comes at the load's start, before any heavy fault that holds every
// publisher or stops a service's production (a compare's twins, drawn later, found
// nothing to publish or no turn before the load ended, and the wrong design that shares
// the relay id passed), and clear of the outages.
func TestTheFirstRelayTwinComesBeforeTheFaultsThatStopPublishing(t *testing.T) {
	for _, tc := range smokeAndDefaultRuns() {
		span, fs := tc.cfg.LoadDuration(), Schedule(tc.cfg, testProcesses, smokeLinks)
		twins, firstStop := ofKindAndFirstOf(fs, span, check.FaultRelayTwin,
			check.FaultQueueDeleted, check.FaultLateConsumer, check.FaultQueueUnbound, check.FaultQueueFull, check.FaultPrivilegeRevoked, check.FaultBrokerAlarm)
		if len(twins) < tc.each {
			t.Fatalf("%d orders: %d relay_twin faults, want at least %d", tc.orders, len(twins), tc.each)
		}
		first := twins[0]
		if first.At >= firstStop {
			t.Errorf("%d orders: the first relay_twin at %v, not before every fault that stops publishing (the first at %v)", tc.orders, first.At, firstStop)
		}
		for _, o := range fs {
			if check.IsOutage(o.Kind) && first.At < o.At+o.Duration && o.At < first.At+first.Duration {
				t.Errorf("%d orders: the first relay_twin at %v overlaps %s at %v", tc.orders, first.At, o.Kind, o.At)
			}
		}
	}
}

// exchange_deleted measures the relays' recovery, so no new fault may kill, freeze, cut
// off or block a relay meanwhile: a one-hour soak's timeout toxic on inventory-1's
// Postgres link, begun 2 s after a delete, held rows inventory-1 had claimed, and the
// drain took 20.1 s against a bound of 20.
func TestAnExchangeDeletedKeepsNewFaultsOffEveryRelayWhileItMeasures(t *testing.T) {
	got := exchangeTargets([]string{"inventory-1", "inventory-2", "ordering-relay"})
	want := []string{everyPublisher,
		"inventory-1", "inventory-1-postgres", "inventory-1-rabbitmq",
		"inventory-2", "inventory-2-postgres", "inventory-2-rabbitmq",
		"ordering-relay", "ordering-relay-postgres", "ordering-relay-rabbitmq"}
	if !slices.Equal(got, want) {
		t.Errorf("exchangeTargets = %v, want %v", got, want)
	}
}

// A fence keeps new faults off its targets at once, without waiting for the ones in
// progress (in the smoke run a delete meets failpoints and a twin's check on the relays,
// and waiting for them would outlast the load), and leaves a protecting fault's hold as
// it was when it ends.
func TestAFenceKeepsNewFaultsOffTheRelaysWithoutWaitingForTheOnesInProgress(t *testing.T) {
	g := newGuard()
	g.enter("inventory-1") // a failpoint in progress
	if !g.protect(time.Second, "inventory-2") {
		t.Fatal("nothing held inventory-2, yet it could not be protected")
	}
	fenced := make(chan struct{})
	go func() { g.fence("inventory-1", "inventory-2", "ordering-relay"); close(fenced) }()
	select {
	case <-fenced:
	case <-time.After(time.Second):
		t.Fatal("the fence waited for the fault in progress on inventory-1")
	}
	entered := make(chan struct{})
	go func() { g.enter("ordering-relay"); close(entered) }()
	select {
	case <-entered:
		t.Fatal("a new fault struck ordering-relay inside the fence")
	case <-time.After(50 * time.Millisecond):
	}
	g.unfence("inventory-1", "inventory-2", "ordering-relay")
	<-entered
	if g.protect(10*time.Millisecond, "inventory-2") {
		t.Fatal("the fence's end gave away inventory-2, which another fault still had to itself")
	}
	g.leave("ordering-relay")
	g.leave("inventory-1")
	g.unprotect("inventory-2")
}
