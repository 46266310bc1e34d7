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
		if isOutage(k) {
			want = cfg.Outages
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

// Outages are drawn from a stream of their own: with or without them, a seed's other
// faults are the same.
func TestOutagesLeaveTheSeedsOtherFaultsWhereTheyWere(t *testing.T) {
	cfg := defaultConfig
	cfg.Orders, cfg.FaultsPerKind, cfg.Outages = 600, 12, 0
	without := schedule(cfg, testProcesses, testLinks)
	cfg.Outages, cfg.OutageLength = 1, 5*time.Second
	var others []fault
	for _, f := range schedule(cfg, testProcesses, testLinks) {
		if !isOutage(f.Kind) {
			f.ID = 0
			others = append(others, f)
		}
	}
	for i := range without {
		without[i].ID = 0
	}
	if !reflect.DeepEqual(without, others) {
		t.Error("adding outages moved the other faults")
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
