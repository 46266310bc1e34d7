package faults

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

var (
	testProcesses = []string{"emailprovider", "inventory-1", "inventory-2", "notification", "ordering", "ordering-relay"}
	testLinks     = []string{"ordering-postgres", "ordering-rabbitmq", "inventory-1-postgres", "notification-emailprovider", "client-ordering"}
	smokeLinks    = []string{"client-ordering", "emailprovider-postgres", "inventory-1-postgres", "inventory-1-rabbitmq",
		"inventory-2-postgres", "inventory-2-rabbitmq", "notification-emailprovider", "notification-postgres",
		"notification-rabbitmq", "ordering-postgres", "ordering-rabbitmq", "ordering-relay-postgres", "ordering-relay-rabbitmq"}
)

func TestScheduleIsDrawnFromTheSeed(t *testing.T) {
	cfg := config.Default
	cfg.Orders, cfg.FaultsPerKind = 600, 12
	a := Schedule(cfg, testProcesses, testLinks)
	b := Schedule(cfg, testProcesses, slicesReversed(testLinks)) // the order links are listed in must not matter
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	cfg.Seed++
	if reflect.DeepEqual(a, Schedule(cfg, testProcesses, testLinks)) {
		t.Fatal("another seed gave the same schedule")
	}
}

func TestScheduleCoversEveryKindNameAndPoison(t *testing.T) {
	cfg := config.Default
	cfg.Orders, cfg.FaultsPerKind, cfg.Outages = 600, 12, 1
	span := cfg.LoadDuration()
	byKind := map[string]int{}
	names := map[string]bool{}
	type pair struct{ queue, kind string }
	poison := map[pair]bool{}
	for i, f := range Schedule(cfg, testProcesses, testLinks) {
		byKind[f.Kind]++
		if f.At <= 0 || f.At >= span {
			t.Errorf("fault %d at %v, outside the load (0, %v)", i, f.At, span)
		}
		switch f.Kind {
		case check.FaultFailpoint:
			name := strings.SplitN(f.Detail, "=", 2)[0]
			names[name] = true
			if _, err := failpoint.Parse(f.Detail, contracts.Failpoints); err != nil {
				t.Errorf("failpoint spec %q: %v", f.Detail, err)
			}
		case check.FaultPoison:
			poison[pair{f.Target, f.Detail}] = true
		}
	}
	for _, k := range check.FaultKinds {
		want := cfg.FaultsPerKind
		switch {
		case check.IsOutage(k):
			want = cfg.Outages
		case k == check.FaultLongTransaction:
			want = min(1, cfg.HeavyFaultsEach())
		case check.IsHeavy(k):
			want = cfg.HeavyFaultsEach()
		}
		if byKind[k] != want {
			t.Errorf("%s: %d faults, want %d", k, byKind[k], want)
		}
	}
	if byKind[check.FaultBrokerRestart] != 0 {
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
	cfg := config.Default
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the default configuration is refused: %v", err)
	}
	links := []string{"client-ordering", "emailprovider-postgres", "inventory-1-postgres", "inventory-1-rabbitmq",
		"inventory-2-postgres", "inventory-2-rabbitmq", "notification-emailprovider", "notification-postgres",
		"notification-rabbitmq", "ordering-postgres", "ordering-rabbitmq", "ordering-relay-postgres", "ordering-relay-rabbitmq"}
	wantTargets := map[string]string{
		check.FaultBrokerOutage:   "inventory-1-rabbitmq,inventory-2-rabbitmq,notification-rabbitmq,ordering-rabbitmq,ordering-relay-rabbitmq",
		check.FaultPostgresOutage: "inventory-1-postgres,inventory-2-postgres,notification-postgres,ordering-postgres,ordering-relay-postgres",
	}
	var outages []check.Fault
	for _, f := range Schedule(cfg, testProcesses, links) {
		if check.IsOutage(f.Kind) {
			outages = append(outages, f)
		}
	}
	count := map[string]int{}
	for i, f := range outages {
		count[f.Kind]++
		if f.Detail != wantTargets[f.Kind] {
			t.Errorf("%s takes down %s, want %s", f.Kind, f.Detail, wantTargets[f.Kind])
		}
		b, ok := cfg.BudgetOf(f.Kind)
		if !ok || (b.Shrunk && f.Duration <= b.Max) {
			t.Errorf("%s of %v does not outlast its budget %+v", f.Kind, f.Duration, b)
		}
		if f.At <= 0 || f.At+f.Duration >= cfg.LoadDuration() {
			t.Errorf("%s at %v lasting %v, not within the load (0, %v)", f.Kind, f.At, f.Duration, cfg.LoadDuration())
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
	if count[check.FaultBrokerOutage] != 5 || count[check.FaultPostgresOutage] != 5 {
		t.Errorf("outages %v, want 5 of each", count)
	}
}

// Outages and heavy faults are drawn from streams of their own: with or without them, a
// seed's short faults are the same. (The heavy faults keep clear of the outages, so
// outages do move them.)
func TestOutagesAndHeavyFaultsLeaveTheSeedsOtherFaultsWhereTheyWere(t *testing.T) {
	short := func(fs []check.Fault) []check.Fault {
		var out []check.Fault
		for _, f := range fs {
			if !check.IsOutage(f.Kind) && !check.IsHeavy(f.Kind) {
				f.ID = 0
				out = append(out, f)
			}
		}
		return out
	}
	cfg := config.Default
	cfg.Orders, cfg.FaultsPerKind, cfg.Outages, cfg.HeavyFaults = 600, 12, 0, 0
	without := Schedule(cfg, testProcesses, testLinks)
	for i := range without {
		without[i].ID = 0
	}
	cfg.Outages, cfg.OutageLength, cfg.HeavyFaults = 1, 5*time.Second, 3
	if !reflect.DeepEqual(without, short(Schedule(cfg, testProcesses, testLinks))) {
		t.Error("adding outages and heavy faults moved the other faults")
	}
}

// Heavy faults keep clear of outages (a queue cannot drain while its consumers cannot
// reach the broker; a relay twin needs its live relay to keep its lock), but for a long
// transaction, and cycle through their targets.
func TestHeavyFaultsKeepClearOfOutagesAndCycleTheirTargets(t *testing.T) {
	cfg := config.Default
	cfg.HeavyFaults = 4
	fs := Schedule(cfg, testProcesses, smokeLinks)
	targets := map[string]map[string]bool{}
	for _, f := range fs {
		if !check.IsHeavy(f.Kind) {
			continue
		}
		if targets[f.Kind] == nil {
			targets[f.Kind] = map[string]bool{}
		}
		targets[f.Kind][f.Target] = true
		for _, o := range fs {
			// A long transaction lasts half the load: outages come while it is held, as
			// they may in production, and it needs no quiet of them.
			if check.IsOutage(o.Kind) && f.Kind != check.FaultLongTransaction && f.At < o.At+o.Duration && o.At < f.At+f.Duration {
				t.Errorf("%s at %v (%v) overlaps %s at %v (%v)", f.Kind, f.At, f.Duration, o.Kind, o.At, o.Duration)
			}
		}
		if f.Kind == check.FaultPrivilegeRevoked {
			if b, _ := cfg.BudgetOf(check.FaultPostgresOutage); f.Duration <= b.Max {
				t.Errorf("privilege revoked for %v, not longer than the consumers' budget %v", f.Duration, b.Max)
			}
		}
	}
	want := map[string]int{check.FaultBrokerAlarm: 2, check.FaultQueueDeleted: 3, check.FaultLateConsumer: 3, check.FaultRelayTwin: 4, check.FaultPrivilegeRevoked: 2, check.FaultQueueUnbound: 3, check.FaultQueueFull: 3}
	for kind, n := range want {
		if len(targets[kind]) != n {
			t.Errorf("%s targets %v, want %d different ones", kind, targets[kind], n)
		}
	}
}

func TestDirectPublisherGetsNoOrderingRelayFailpoint(t *testing.T) {
	cfg := config.Default
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

// Every run caps each work queue with queue_full in turn, with the policy an operator
// would set: overflow reject-publish, so the broker nacks; drop-head would delete events.
func TestTheScheduleCapsTheWorkQueuesWithAPolicyThatNacks(t *testing.T) {
	cfg := config.Default
	cfg.HeavyFaults = 3
	targets := map[string]bool{}
	for _, f := range Schedule(cfg, testProcesses, smokeLinks) {
		if f.Kind != check.FaultQueueFull {
			continue
		}
		targets[f.Target] = true
		if !strings.Contains(f.Detail, `"overflow":"reject-publish"`) || f.Duration < 4*time.Second {
			t.Errorf("queue_full on %s for %v with %s, want reject-publish for seconds", f.Target, f.Duration, f.Detail)
		}
	}
	for _, q := range []string{contracts.QueueInventoryOrderPlaced, contracts.QueueOrderingStockEvents, contracts.QueueNotificationStockEvents} {
		if !targets[q] {
			t.Errorf("no queue_full on %s: %v", q, targets)
		}
	}
	// A queue takes one policy: the cap carries the run's delivery limit over.
	body, err := queueFullBody(5, contracts.QueueInventoryOrderPlaced)
	if err != nil || !strings.Contains(body, `"delivery-limit":5`) || !strings.Contains(body, `"max-length":0`) {
		t.Errorf("queue_full policy with --delivery-limit 5: %s, %v", body, err)
	}
}

func TestARunGivenHeavyKindsSchedulesOnlyThoseHeavyFaults(t *testing.T) {
	cfg := config.Default
	cfg.HeavyFaults, cfg.HeavyKinds = 2, []string{check.FaultQueueUnbound}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	heavy := map[string]int{}
	for _, f := range Schedule(cfg, testProcesses, smokeLinks) {
		if check.IsHeavy(f.Kind) {
			heavy[f.Kind]++
		}
	}
	if want := map[string]int{check.FaultQueueUnbound: 2}; !reflect.DeepEqual(heavy, want) {
		t.Errorf("heavy faults %v, want %v", heavy, want)
	}
	cfg.HeavyKinds = []string{"queue_unbond"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `"queue_unbond" is not a heavy kind`) {
		t.Errorf("an unknown heavy kind: %v", err)
	}
}
