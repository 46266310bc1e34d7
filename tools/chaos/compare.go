package main

import (
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

// Design is one way to build the system that compare runs under the same faults.
type Design struct {
	Name              string
	Publisher         string
	InventoryStrategy string
	Right             bool // the design the contracts prescribe; every other one must be caught
}

// Designs are compare's contenders: the right design and one wrong turn per window.
var Designs = []Design{
	{Name: "outbox + inbox (default)", Publisher: "outbox", InventoryStrategy: "inbox", Right: true},
	{Name: "naive consumer", Publisher: "outbox", InventoryStrategy: "naive"},
	{Name: "check-then-process", Publisher: "outbox", InventoryStrategy: "check-then-process"},
	{Name: "direct publish", Publisher: "direct", InventoryStrategy: "inbox"},
}

// runCompare runs every design with the same seed and fault schedule and prints the
// scoreboard. It fails when the right design has a violation or a wrong one has none:
// either means the harness can no longer tell them apart.
func runCompare(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	var results []*Result
	for _, d := range Designs {
		c := cfg
		c.Design, c.Publisher, c.InventoryStrategy = d.Name, d.Publisher, d.InventoryStrategy
		res, err := Run(ctx, c, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", d.Name, err)
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
	for i, d := range Designs {
		if d.Right != results[i].Passed {
			return errViolations
		}
	}
	return nil
}

func printScoreboard(w io.Writer, results []*Result) {
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
