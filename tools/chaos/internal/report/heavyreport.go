package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/faults"
)

func init() {
	// The heavy kinds' colours and bands in the charts (charts.go).
	kindColors[check.FaultBrokerAlarm] = "#ad494a"
	kindColors[check.FaultQueueDeleted] = "#8c6d31"
	kindColors[check.FaultLateConsumer] = "#e7969c"
	kindColors[check.FaultRelayTwin] = "#5254a3"
	kindColors[check.FaultPrivilegeRevoked] = "#843c39"
	kindColors[check.FaultQueueUnbound] = "#bd9e39"
	kindColors[check.FaultQueueFull] = "#e7cb94"
	kindColors[check.FaultConsumerTimeout] = "#7b4173"
	kindColors[check.FaultLongTransaction] = "#637939"
	faultCategory[check.FaultBrokerAlarm] = "network"
	faultCategory[check.FaultQueueDeleted] = "process"
	faultCategory[check.FaultLateConsumer] = "process"
	faultCategory[check.FaultRelayTwin] = "process"
	faultCategory[check.FaultPrivilegeRevoked] = "network"
	faultCategory[check.FaultQueueUnbound] = "process"
	faultCategory[check.FaultQueueFull] = "process"
	faultCategory[check.FaultConsumerTimeout] = "process"
	faultCategory[check.FaultLongTransaction] = "process"
	// The cluster's (make chaos-cluster): a node or a primary gone is an outage of a part.
	kindColors[check.FaultBrokerNodeKilled] = "#3182bd"
	kindColors[check.FaultBrokerNodeStopped] = "#6baed6"
	kindColors[check.FaultPostgresFailover] = "#31a354"
	faultCategory[check.FaultBrokerNodeKilled] = "outage"
	faultCategory[check.FaultBrokerNodeStopped] = "outage"
	faultCategory[check.FaultPostgresFailover] = "outage"
}

// printHeavyFaults writes one row per heavy fault: when, what, what happened and its own
// check, each broker alarm's time to drain, and each consumer timeout's time until
// the events published before its held consumer came back were processed.
func printHeavyFaults(w io.Writer, r *Result) {
	var heavy []check.Fault
	for _, f := range r.Faults {
		if check.IsHeavy(f.Kind) {
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
		state := "-"
		switch c := f.Check; {
		case c == nil && !f.Fired:
			state = "missed"
		case c == nil:
		case !c.Checked:
			state = "not checked"
		case c.Violation != "":
			state = "FAILED"
		case f.Kind == check.FaultBrokerAlarm:
			state = fmt.Sprintf("drained in %.1fs", c.Drain.Seconds())
			drains = append(drains, c.Drain)
		case f.Kind == check.FaultConsumerTimeout:
			state = fmt.Sprintf("processed in %.1fs", c.Drain.Seconds())
		case f.Kind == check.FaultLongTransaction:
			state = fmt.Sprintf("cleaned in %.1fs", c.Drain.Seconds())
		default:
			state = "ok"
		}
		what := f.Note
		if f.Check != nil && f.Check.Detail != "" {
			what += "; " + f.Check.Detail
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, at, f.Target, length, state, what)
	}
	tw.Flush()
	if len(drains) > 0 {
		slices.Sort(drains)
		var s []string
		for _, d := range drains {
			s = append(s, fmt.Sprintf("%.1fs", d.Seconds()))
		}
		fmt.Fprintf(w, "  broker alarms: every row written before an alarm ended was published %s after it (limit %v)\n",
			strings.Join(s, ", "), faults.AlarmDrainLimit)
	}
}
