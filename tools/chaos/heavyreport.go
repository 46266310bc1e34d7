package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	// The heavy kinds' colours and bands in the plots (plot.go).
	kindColors[faultBrokerAlarm] = "#ad494a"
	kindColors[faultQueueDeleted] = "#8c6d31"
	kindColors[faultLateConsumer] = "#e7969c"
	kindColors[faultRelayTwin] = "#5254a3"
	kindColors[faultPrivilegeRevoked] = "#843c39"
	faultCategory[faultBrokerAlarm] = "network"
	faultCategory[faultQueueDeleted] = "process"
	faultCategory[faultLateConsumer] = "process"
	faultCategory[faultRelayTwin] = "process"
	faultCategory[faultPrivilegeRevoked] = "network"
}

// printHeavyFaults writes one row per heavy fault: when, what, what happened and its own
// check, and each broker alarm's time to drain.
func printHeavyFaults(w io.Writer, r *result) {
	var heavy []fault
	for _, f := range r.Faults {
		if isHeavy(f.Kind) {
			heavy = append(heavy, f)
		}
	}
	if len(heavy) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HEAVY FAULT\tAT\tTARGET\tLENGTH\tCHECK\tWHAT HAPPENED")
	var drains []time.Duration
	for _, f := range heavy {
		at, length := "-", "-"
		if !f.Start.IsZero() {
			at = fmt.Sprintf("%.1fs", f.Start.Sub(r.LoadStart).Seconds())
			length = fmt.Sprintf("%.1fs", f.End.Sub(f.Start).Seconds())
		}
		check := "-"
		switch c := f.Check; {
		case c == nil && !f.Fired:
			check = "missed"
		case c == nil:
		case !c.Checked:
			check = "not checked"
		case c.Violation != "":
			check = "FAILED"
		case f.Kind == faultBrokerAlarm:
			check = fmt.Sprintf("drained in %.1fs", c.Drain.Seconds())
			drains = append(drains, c.Drain)
		default:
			check = "ok"
		}
		what := f.Note
		if f.Check != nil && f.Check.Detail != "" {
			what += "; " + f.Check.Detail
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, at, f.Target, length, check, what)
	}
	tw.Flush()
	if len(drains) > 0 {
		slices.Sort(drains)
		var s []string
		for _, d := range drains {
			s = append(s, fmt.Sprintf("%.1fs", d.Seconds()))
		}
		fmt.Fprintf(w, "  broker alarms: every row written before an alarm ended was published %s after it (limit %v)\n",
			strings.Join(s, ", "), alarmDrainLimit)
	}
}
