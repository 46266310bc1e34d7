package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
)

var (
	testProcesses = []string{"emailprovider", "inventory-1", "inventory-2", "notification", "ordering", "ordering-relay"}
	testLinks     = []string{"ordering-postgres", "ordering-rabbitmq", "inventory-1-postgres", "notification-emailprovider", "client-ordering"}
	smokeLinks    = []string{"client-ordering", "emailprovider-postgres", "inventory-1-postgres", "inventory-1-rabbitmq",
		"inventory-2-postgres", "inventory-2-rabbitmq", "notification-emailprovider", "notification-postgres",
		"notification-rabbitmq", "ordering-postgres", "ordering-rabbitmq", "ordering-relay-postgres", "ordering-relay-rabbitmq"}
)

func TestScheduleIsDrawnFromTheSeed(t *testing.T) {
	cfg := defaultConfig
	cfg.Orders, cfg.FaultsPerKind = 600, 12
	a := schedule(cfg, testProcesses, testLinks)
	b := schedule(cfg, testProcesses, slicesReversed(testLinks)) // the order links are listed in must not matter
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	cfg.Seed++
	if reflect.DeepEqual(a, schedule(cfg, testProcesses, testLinks)) {
		t.Fatal("another seed gave the same schedule")
	}
}

func TestScheduleCoversEveryKindNameAndPoison(t *testing.T) {
	cfg := defaultConfig
	cfg.Orders, cfg.FaultsPerKind, cfg.Outages = 600, 12, 1
	span := cfg.loadDuration()
	byKind := map[string]int{}
	names := map[string]bool{}
	type pair struct{ queue, kind string }
	poison := map[pair]bool{}
	for i, f := range schedule(cfg, testProcesses, testLinks) {
		byKind[f.Kind]++
		if f.At <= 0 || f.At >= span {
			t.Errorf("fault %d at %v, outside the load (0, %v)", i, f.At, span)
		}
		switch f.Kind {
		case faultFailpoint:
			name := strings.SplitN(f.Detail, "=", 2)[0]
			names[name] = true
			if _, err := failpoint.Parse(f.Detail, contracts.Failpoints); err != nil {
				t.Errorf("failpoint spec %q: %v", f.Detail, err)
			}
		case faultPoison:
			poison[pair{f.Target, f.Detail}] = true
		}
	}
	for _, k := range faultKinds {
		want := cfg.FaultsPerKind
		switch {
		case isOutage(k):
			want = cfg.Outages
		case isHeavy(k):
			want = cfg.heavyFaults()
		}
		if byKind[k] != want {
			t.Errorf("%s: %d faults, want %d", k, byKind[k], want)
		}
	}
	if byKind[faultBrokerRestart] != 0 {
		t.Error("broker restarts scheduled without --broker-restart")
	}
	if len(names) != len(contracts.Failpoints) {
		t.Errorf("failpoints %v, want all of %v", names, contracts.Failpoints)
	}
	if len(poison) != 12 {
		t.Errorf("%d (queue, kind) pairs of poison, want all 3 × 4: %v", len(poison), poison)
	}
}

// The default run's outages: 5 of each kind, taking every service's link to the broker or
// to Postgres (not the provider's: it plays a third party), each longer than the budget
// it must outlast, none closer than one outage length to another, all within the load.
func TestOutagesTakeEveryLinkLongerThanTheirBudgetOneAtATime(t *testing.T) {
	cfg := defaultConfig
	if err := cfg.validate(); err != nil {
		t.Fatalf("the default configuration is refused: %v", err)
	}
	links := []string{"client-ordering", "emailprovider-postgres", "inventory-1-postgres", "inventory-1-rabbitmq",
		"inventory-2-postgres", "inventory-2-rabbitmq", "notification-emailprovider", "notification-postgres",
		"notification-rabbitmq", "ordering-postgres", "ordering-rabbitmq", "ordering-relay-postgres", "ordering-relay-rabbitmq"}
	wantTargets := map[string]string{
		faultBrokerOutage:   "inventory-1-rabbitmq,inventory-2-rabbitmq,notification-rabbitmq,ordering-rabbitmq,ordering-relay-rabbitmq",
		faultPostgresOutage: "inventory-1-postgres,inventory-2-postgres,notification-postgres,ordering-postgres,ordering-relay-postgres",
	}
	var outages []fault
	for _, f := range schedule(cfg, testProcesses, links) {
		if isOutage(f.Kind) {
			outages = append(outages, f)
		}
	}
	count := map[string]int{}
	for i, f := range outages {
		count[f.Kind]++
		if f.Detail != wantTargets[f.Kind] {
			t.Errorf("%s takes down %s, want %s", f.Kind, f.Detail, wantTargets[f.Kind])
		}
		b, ok := cfg.budgetOf(f.Kind)
		if !ok || (b.Shrunk && f.Duration <= b.Max) {
			t.Errorf("%s of %v does not outlast its budget %+v", f.Kind, f.Duration, b)
		}
		if f.At <= 0 || f.At+f.Duration >= cfg.loadDuration() {
			t.Errorf("%s at %v lasting %v, not within the load (0, %v)", f.Kind, f.At, f.Duration, cfg.loadDuration())
		}
		if i > 0 {
			prev := outages[i-1]
			if prev.At+prev.Duration+cfg.OutageLength > f.At {
				t.Errorf("%s at %v is less than %v after %s at %v lasting %v", f.Kind, f.At, cfg.OutageLength, prev.Kind, prev.At, prev.Duration)
			}
			if prev.Kind == f.Kind {
				t.Errorf("two %s in a row at %v and %v: the kinds should take turns", f.Kind, prev.At, f.At)
			}
		}
	}
	if count[faultBrokerOutage] != 5 || count[faultPostgresOutage] != 5 {
		t.Errorf("outages %v, want 5 of each", count)
	}
}

// Outages and heavy faults are drawn from streams of their own: with or without them, a
// seed's short faults are the same. (The heavy faults keep clear of the outages, so
// outages do move them.)
func TestOutagesAndHeavyFaultsLeaveTheSeedsOtherFaultsWhereTheyWere(t *testing.T) {
	short := func(fs []fault) []fault {
		var out []fault
		for _, f := range fs {
			if !isOutage(f.Kind) && !isHeavy(f.Kind) {
				f.ID = 0
				out = append(out, f)
			}
		}
		return out
	}
	cfg := defaultConfig
	cfg.Orders, cfg.FaultsPerKind, cfg.Outages, cfg.HeavyFaults = 600, 12, 0, 0
	without := schedule(cfg, testProcesses, testLinks)
	for i := range without {
		without[i].ID = 0
	}
	cfg.Outages, cfg.OutageLength, cfg.HeavyFaults = 1, 5*time.Second, 3
	if !reflect.DeepEqual(without, short(schedule(cfg, testProcesses, testLinks))) {
		t.Error("adding outages and heavy faults moved the other faults")
	}
}

// Heavy faults keep clear of outages (a queue cannot drain while its consumers cannot
// reach the broker; a relay twin needs its live relay to keep its lock) and cycle
// through their targets.
func TestHeavyFaultsKeepClearOfOutagesAndCycleTheirTargets(t *testing.T) {
	cfg := defaultConfig
	cfg.HeavyFaults = 4
	fs := schedule(cfg, testProcesses, smokeLinks)
	targets := map[string]map[string]bool{}
	for _, f := range fs {
		if !isHeavy(f.Kind) {
			continue
		}
		if targets[f.Kind] == nil {
			targets[f.Kind] = map[string]bool{}
		}
		targets[f.Kind][f.Target] = true
		for _, o := range fs {
			if isOutage(o.Kind) && f.At < o.At+o.Duration && o.At < f.At+f.Duration {
				t.Errorf("%s at %v (%v) overlaps %s at %v (%v)", f.Kind, f.At, f.Duration, o.Kind, o.At, o.Duration)
			}
		}
		if f.Kind == faultPrivilegeRevoked {
			if b, _ := cfg.budgetOf(faultPostgresOutage); f.Duration <= b.Max {
				t.Errorf("privilege revoked for %v, not longer than the consumers' budget %v", f.Duration, b.Max)
			}
		}
	}
	want := map[string]int{faultBrokerAlarm: 2, faultQueueDeleted: 3, faultLateConsumer: 3, faultRelayTwin: 4, faultPrivilegeRevoked: 2}
	for kind, n := range want {
		if len(targets[kind]) != n {
			t.Errorf("%s targets %v, want %d different ones", kind, targets[kind], n)
		}
	}
}

// An outage that a budget would have survived proves nothing about it: the configuration
// is refused, and says which budget.
func TestAnOutageShorterThanABudgetIsRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*config)
		budget string
	}{
		{"the queues' delivery limit against 2 s outages", func(c *config) { c.RelayMaxAttempts, c.OutageLength = 1, 2*time.Second }, "consumer"},
		{"the relay's default attempts", func(c *config) { c.RelayMaxAttempts = 25 }, "relay"},
		{"a 2 s outage", func(c *config) { c.OutageLength = 2 * time.Second }, "relay"},
	} {
		cfg := defaultConfig
		c.change(&cfg)
		err := cfg.validate()
		if err == nil || !strings.Contains(err.Error(), "the "+c.budget+" budget") {
			t.Errorf("%s: validate() = %v, want the %s budget named", c.name, err, c.budget)
		}
		cfg.Outages = 0
		if err := cfg.validate(); err != nil {
			t.Errorf("%s without outages: %v", c.name, err)
		}
	}
}

func TestDirectPublisherGetsNoOrderingRelayFailpoint(t *testing.T) {
	cfg := defaultConfig
	cfg.Publisher = "direct"
	for _, p := range failpointProcesses(cfg)[contracts.RelayAfterPublish] {
		if strings.HasPrefix(p, "ordering") {
			t.Errorf("%s runs no relay with the direct publisher; its failpoint would never fire", p)
		}
	}
}

func slicesReversed(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[len(xs)-1-i] = x
	}
	return out
}
