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
	schedule := Schedule(cfg, append(names, cfg.ProcessNames("inventory")...), testLinks)
	var node, failover []check.Fault
	var targets []string
	for _, f := range schedule {
		switch f.Kind {
		case check.FaultBrokerNodeKilled, check.FaultBrokerNodeStopped:
			node = append(node, f)
		case check.FaultPostgresFailover:
			failover = append(failover, f)
			targets = append(targets, f.Target)
		default:
			continue
		}
		if f.At <= 0 || f.At+f.Duration >= cfg.LoadDuration() {
			t.Errorf("%s at %v for %v: outside the load of %v", f.Kind, f.At, f.Duration, cfg.LoadDuration())
		}
	}
	if len(node) < 3 || len(failover) < 3 {
		t.Fatalf("%d broker node faults and %d failovers; issue 25 wants at least three of each", len(node), len(failover))
	}
	if !slices.Contains(targets, "ordering") {
		t.Errorf("failovers of %v: none of ordering's, the one whose 201s must survive it", targets)
	}
	cluster := append(node, failover...)
	slices.SortFunc(cluster, func(a, b check.Fault) int { return int(a.At - b.At) })
	for i := 1; i < len(cluster); i++ {
		if prev := cluster[i-1]; prev.At+prev.Duration >= cluster[i].At {
			t.Errorf("%s at %v for %v overlaps %s at %v: two nodes down at once is a double fault", prev.Kind, prev.At, prev.Duration, cluster[i].Kind, cluster[i].At)
		}
	}
	cfg.Cluster, cfg.NodeLosses, cfg.Failovers = false, 0, 0
	for _, f := range Schedule(cfg, names, testLinks) {
		if check.IsCluster(f.Kind) {
			t.Fatalf("a run without the cluster got %s", f.Kind)
		}
	}
}
