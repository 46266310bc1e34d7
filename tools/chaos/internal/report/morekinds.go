package report

import "github.com/bookstore-go/bookstore/tools/chaos/internal/check"

func init() {
	// The colours and bands of the heavy kinds of faults/exchange.go, sessions.go and
	// hopeless.go and latecommit.go in the charts (charts.go). Their checks' details carry their recovery
	// times into the HEAVY FAULT table.
	kindColors[check.FaultExchangeDeleted] = "#6b6ecf"
	kindColors[check.FaultSessionKilled] = "#b5cf6b"
	kindColors[check.FaultHalfOpen] = "#cedb9c"
	kindColors[check.FaultHopeless] = "#de9ed6"
	kindColors[check.FaultLateCommit] = "#9c9ede"
	faultCategory[check.FaultExchangeDeleted] = "process"
	faultCategory[check.FaultSessionKilled] = "network"
	faultCategory[check.FaultHalfOpen] = "network"
	faultCategory[check.FaultLateCommit] = "process"
}
