package experiment

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/report"
)

// design is one way to build the system that compare runs under the same faults.
type design struct {
	name              string
	publisher         string
	inventoryStrategy string
	cancellations     string // "" is sequence
	relayQueueCheck   string // "" is bindings
	relayTwin         string // "" is refuse
	consumerOnRefusal string // "" is pause
	orderingCommit    string // "" is the server's: wait for the synchronous standby
	pinnedBroker      string // "" is every node
	right             bool   // the design the contracts prescribe; every other one must be caught
}

// designs are compare's contenders: the right design and one wrong turn per window.
var designs = []design{
	{name: "outbox + inbox (default)", publisher: "outbox", inventoryStrategy: "inbox", right: true},
	{name: "naive consumer", publisher: "outbox", inventoryStrategy: "naive"},
	{name: "check-then-process", publisher: "outbox", inventoryStrategy: "check-then-process"},
	{name: "direct publish", publisher: "direct", inventoryStrategy: "inbox"},
	{name: "cancellations ignore sequence", publisher: "outbox", inventoryStrategy: "inbox", cancellations: "ignore-sequence"},
	// A relay that trusts mandatory alone, a silent relay twin, a consumer that
	// requeues on its database's refusal. Each is caught by a heavy fault.
	{name: "relay trusts mandatory", publisher: "outbox", inventoryStrategy: "inbox", relayQueueCheck: "mandatory"},
	{name: "relay twin shares", publisher: "outbox", inventoryStrategy: "inbox", relayTwin: "share"},
	{name: "consumer requeues refusals", publisher: "outbox", inventoryStrategy: "inbox", consumerOnRefusal: "requeue"},
}

// clusterDesigns are compare's contenders in the cluster profile: the right
// design, and the two wrong turns the topology itself opens. Both need the cluster's
// faults to be caught; the designs above are told apart without it, faster.
var clusterDesigns = []design{
	{name: "outbox + inbox (default)", publisher: "outbox", inventoryStrategy: "inbox", right: true},
	// A 201 for an order only the primary had: the failover's standby, cut off just
	// before, is promoted without it (postgres_failover).
	{name: "ordering commits locally", publisher: "outbox", inventoryStrategy: "inbox", orderingCommit: "local"},
	// Every service given one node's address, the one the node faults strike: the
	// pipeline stops while that node is down (broker_node_stopped's check).
	{name: "pinned to one broker node", publisher: "outbox", inventoryStrategy: "inbox", pinnedBroker: "ordering,inventory,notification"},
}

// Compare runs every design with the same seed and fault schedule and prints the
// scoreboard. It fails when the right design has a violation or a wrong one has none:
// either means the harness can no longer tell them apart.
func Compare(ctx context.Context, cfg config.Config, stdout, stderr io.Writer) error {
	var results []*report.Result
	chosen := chosenDesigns(cfg.Designs, cfg.Cluster)
	if len(chosen) == 0 {
		return fmt.Errorf("-designs %q names none of the designs", cfg.Designs)
	}
	for _, d := range chosen {
		c := cfg
		c.Design, c.Publisher, c.InventoryStrategy = d.name, d.publisher, d.inventoryStrategy
		c.Cancellations = cmp.Or(d.cancellations, "sequence")
		c.RelayQueueCheck = cmp.Or(d.relayQueueCheck, "bindings")
		c.RelayTwin = cmp.Or(d.relayTwin, "refuse")
		c.ConsumerOnRefusal = cmp.Or(d.consumerOnRefusal, "pause")
		c.OrderingCommit, c.PinnedBroker = d.orderingCommit, d.pinnedBroker
		res, err := Run(ctx, c, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		report.PrintSummary(stderr, res)
		results = append(results, res)
	}
	var board strings.Builder
	report.PrintScoreboard(&board, results, true)
	fmt.Fprint(stdout, board.String())
	if len(results) > 0 {
		_ = os.WriteFile(filepath.Join(filepath.Dir(results[0].ReportDir), "scoreboard.txt"), []byte(board.String()), 0o644)
	}
	for i, d := range chosen {
		if d.right != results[i].Passed {
			return ErrViolations
		}
	}
	return nil
}

// chosenDesigns returns the designs whose names contain one of the comma-separated parts
// of names, all of them for "": the cluster profile's when cluster is set.
func chosenDesigns(names string, cluster bool) []design {
	all := designs
	if cluster {
		all = clusterDesigns
	}
	if strings.TrimSpace(names) == "" {
		return all
	}
	var out []design
	for _, d := range all {
		for _, part := range strings.Split(names, ",") {
			if part = strings.TrimSpace(part); part != "" && strings.Contains(d.name, part) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}
