package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// design is one way to build the system that compare runs under the same faults.
type design struct {
	name              string
	publisher         string
	inventoryStrategy string
	cancellations     string // "" is sequence
	right             bool   // the design the contracts prescribe; every other one must be caught
}

// designs are compare's contenders: the right design and one wrong turn per window.
var designs = []design{
	{name: "outbox + inbox (default)", publisher: "outbox", inventoryStrategy: "inbox", right: true},
	{name: "naive consumer", publisher: "outbox", inventoryStrategy: "naive"},
	{name: "check-then-process", publisher: "outbox", inventoryStrategy: "check-then-process"},
	{name: "direct publish", publisher: "direct", inventoryStrategy: "inbox"},
	{name: "cancellations ignore sequence", publisher: "outbox", inventoryStrategy: "inbox", cancellations: "ignore-sequence"},
}

// runCompare runs every design with the same seed and fault schedule and prints the
// scoreboard. It fails when the right design has a violation or a wrong one has none:
// either means the harness can no longer tell them apart.
func runCompare(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	var results []*result
	for _, d := range designs {
		c := cfg
		c.Design, c.Publisher, c.InventoryStrategy = d.name, d.publisher, d.inventoryStrategy
		c.Cancellations = cmp.Or(d.cancellations, "sequence")
		res, err := runChaos(ctx, c, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		printSummary(stderr, res)
		results = append(results, res)
	}
	var board strings.Builder
	printScoreboard(&board, results)
	fmt.Fprint(stdout, board.String())
	if len(results) > 0 {
		_ = os.WriteFile(filepath.Join(filepath.Dir(results[0].ReportDir), "scoreboard.txt"), []byte(board.String()), 0o644)
	}
	for i, d := range designs {
		if d.right != results[i].Passed {
			return errViolations
		}
	}
	return nil
}

func printScoreboard(w io.Writer, results []*result) {
	fmt.Fprintln(w, "\nSCOREBOARD (same seed, same faults)")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESIGN\tORDERS\tVIOLATIONS\tWHAT THE CHECKER FOUND\tREPORT")
	for _, r := range results {
		found := map[string]int{}
		for _, v := range r.Verdicts {
			for k, n := range v.Counts {
				found[k] += n
			}
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(found)) {
			parts = append(parts, fmt.Sprintf("%d %s", found[k], k))
		}
		what := strings.Join(parts, "; ")
		if what == "" {
			what = "nothing: every invariant holds"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", r.Design, r.Orders.Total, r.Violations, what, filepath.Join(r.ReportDir, "report.html"))
	}
	tw.Flush()
}
