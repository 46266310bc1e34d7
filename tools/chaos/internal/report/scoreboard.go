package report

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// PrintScoreboard writes compare's scoreboard: one row per design, with what the checker
// found, and with the path of each design's report.html when paths is set.
func PrintScoreboard(w io.Writer, results []*Result, paths bool) {
	fmt.Fprintln(w, "\nSCOREBOARD (same seed, same faults)")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	header := "DESIGN\tORDERS\tVIOLATIONS\tWHAT THE CHECKER FOUND"
	if paths {
		header += "\tREPORT"
	}
	fmt.Fprintln(tw, header)
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
		row := fmt.Sprintf("%s\t%d\t%d\t%s", r.Design, r.Orders.Total, r.Violations, what)
		if paths {
			row += "\t" + filepath.Join(r.ReportDir, "report.html")
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
}
