package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/failpoint"
)

var (
	testProcesses = []string{"emailprovider", "inventory-1", "inventory-2", "notification", "ordering", "ordering-relay"}
	testLinks     = []string{"ordering-postgres", "ordering-rabbitmq", "inventory-1-postgres", "notification-emailprovider", "client-ordering"}
)

func TestScheduleIsDrawnFromTheSeed(t *testing.T) {
	cfg := DefaultConfig
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
	cfg := DefaultConfig
	cfg.Orders, cfg.FaultsPerKind = 600, 12
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
		case FaultFailpoint:
			name := strings.SplitN(f.Detail, "=", 2)[0]
			names[name] = true
			if _, err := failpoint.Parse(f.Detail); err != nil {
				t.Errorf("failpoint spec %q: %v", f.Detail, err)
			}
		case FaultPoison:
			poison[pair{f.Target, f.Detail}] = true
		}
	}
	for _, k := range FaultKinds {
		if byKind[k] != cfg.FaultsPerKind {
			t.Errorf("%s: %d faults, want %d", k, byKind[k], cfg.FaultsPerKind)
		}
	}
	if byKind[FaultBrokerRestart] != 0 {
		t.Error("broker restarts scheduled without --broker-restart")
	}
	if len(names) != len(failpoint.Names) {
		t.Errorf("failpoints %v, want all of %v", names, failpoint.Names)
	}
	if len(poison) != 12 {
		t.Errorf("%d (queue, kind) pairs of poison, want all 3 × 4: %v", len(poison), poison)
	}
}

func TestDirectPublisherGetsNoOrderingRelayFailpoint(t *testing.T) {
	cfg := DefaultConfig
	cfg.Publisher = "direct"
	for _, p := range failpointProcesses(cfg)[failpoint.RelayAfterPublish] {
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
