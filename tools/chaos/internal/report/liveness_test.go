package report

import (
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

func TestTheLivenessTableGivesEachKindsRecoveryAndTheSlowestFaultFirst(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	r := &Result{Config: config.Default, LoadStart: t0, OutboxRecovery: []check.FaultRecovery{
		{ID: 1, Kind: check.FaultKill, Target: "ordering-1", End: t0.Add(10 * time.Second), Backlog: 12, Published: 300 * time.Millisecond, Drained: 900 * time.Millisecond},
		{ID: 2, Kind: check.FaultKill, Target: "inventory-2", End: t0.Add(20 * time.Second)},
		{ID: 3, Kind: check.FaultBrokerOutage, Target: "all", End: t0.Add(30 * time.Second), Backlog: 200, Published: 600 * time.Millisecond, Drained: 4200 * time.Millisecond},
		{ID: 4, Kind: check.FaultQueueFull, Target: "inventory.order-placed", End: t0.Add(40 * time.Second), Backlog: 3, Published: -1, Drained: -1},
	}}
	var b strings.Builder
	PrintLivenessTable(&b, r)
	out := b.String()
	for _, want := range []string{
		"| `kill` | 2 | 1 | 0.3 s / 0.3 s | 0.9 s / 0.9 s |",
		"| `broker_outage` | 1 | 1 | 0.6 s / 0.6 s | 4.2 s / 4.2 s |",
		"| `queue_full` | 1 | 1 | never / never | never / never |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no row %q in\n%s", want, out)
		}
	}
	never, outage, kill := strings.Index(out, "| 4 | `queue_full`"), strings.Index(out, "| 3 | `broker_outage`"), strings.Index(out, "| 1 | `kill`")
	if never < 0 || outage < never || kill < outage {
		t.Errorf("per-fault rows not slowest first (never, 4.2 s, 0.9 s):\n%s", out)
	}
	if strings.Contains(out, "| 2 | `kill`") {
		t.Errorf("a fault with no backlog at its end has a row of its own:\n%s", out)
	}
	b.Reset()
	PrintLivenessTable(&b, &Result{})
	if b.Len() != 0 {
		t.Errorf("a report without samples prints %q", b.String())
	}
}
