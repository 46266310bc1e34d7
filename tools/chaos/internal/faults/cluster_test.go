package faults

import (
	"io"
	"slices"
	"testing"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

func TestTheClusterProfileKillsThreeNodesAndFailsOverThreePrimariesOneAtATime(t *testing.T) {
	cfg, err := config.Parse([]string{"--profile", "cluster"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	names := cfg.ProcessNames("ordering")
	for seed := uint64(1); seed <= 5; seed++ {
		cfg.Seed = seed
		checkClusterSchedule(t, cfg, Schedule(cfg, append(names, cfg.ProcessNames("inventory")...), testLinks))
	}
	cfg.Cluster, cfg.NodeLosses, cfg.Failovers = false, 0, 0
	for _, f := range Schedule(cfg, names, testLinks) {
		if check.IsCluster(f.Kind) {
			t.Fatalf("a run without the cluster got %s", f.Kind)
		}
	}
}

func checkClusterSchedule(t *testing.T, cfg config.Config, schedule []check.Fault) {
	t.Helper()
	var node, failover, outages []check.Fault
	var targets []string
	for _, f := range schedule {
		switch f.Kind {
		case check.FaultBrokerNodeKilled, check.FaultBrokerNodeStopped:
			node = append(node, f)
		case check.FaultPostgresFailover:
			failover = append(failover, f)
			targets = append(targets, f.Target)
		case check.FaultBrokerOutage, check.FaultPostgresOutage:
			outages = append(outages, f)
			continue
		default:
			continue
		}
		if f.At <= 0 || f.At+clusterBusy(f) >= cfg.LoadDuration() {
			t.Errorf("%s at %v, busy for %v: not over within the load of %v", f.Kind, f.At, clusterBusy(f), cfg.LoadDuration())
		}
	}
	if len(node) < 3 || len(failover) < 3 {
		t.Fatalf("seed %d: %d broker node faults and %d failovers; a run needs at least three of each", cfg.Seed, len(node), len(failover))
	}
	if !slices.Contains(targets, "ordering") {
		t.Errorf("failovers of %v: none of ordering's, the one whose 201s must survive it", targets)
	}
	cluster := append(node, failover...)
	slices.SortFunc(cluster, func(a, b check.Fault) int { return int(a.At - b.At) })
	for i := 1; i < len(cluster); i++ {
		if prev := cluster[i-1]; prev.At+clusterBusy(prev) > cluster[i].At {
			t.Errorf("seed %d: %s at %v, busy for %v, overlaps %s at %v: two nodes down at once is a double fault", cfg.Seed, prev.Kind, prev.At, clusterBusy(prev), cluster[i].Kind, cluster[i].At)
		}
	}
	if len(outages) != 2*cfg.Outages {
		t.Errorf("seed %d: %d outages, want %d", cfg.Seed, len(outages), 2*cfg.Outages)
	}
	for _, o := range outages {
		for _, c := range cluster {
			if o.At < c.At+clusterBusy(c) && c.At < o.At+o.Duration {
				t.Errorf("seed %d: %s at %v for %v overlaps %s at %v", cfg.Seed, o.Kind, o.At, o.Duration, c.Kind, c.At)
			}
		}
	}
}
