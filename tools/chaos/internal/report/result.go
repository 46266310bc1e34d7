package report

import (
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// Quiet is what the harness saw while waiting for the system to settle.
type Quiet struct {
	Reached bool          `json:"reached"`
	Waited  time.Duration `json:"waited_ns"`
	Last    Backlog       `json:"last"`
	Reason  string        `json:"reason"`
}

// Backlog is the work the system still has: unpublished outbox rows, messages in the
// work queues, orders without an outcome, email records not finished.
type Backlog struct {
	Outbox        int `json:"outbox"`
	Queued        int `json:"queued"`
	Pending       int `json:"pending_orders"`
	Notifications int `json:"unfinished_notifications"`
}

// Drained reports whether nothing is left to publish, deliver or email.
func (b Backlog) Drained() bool { return b.Outbox == 0 && b.Queued == 0 && b.Notifications == 0 }

// Result is one run: what was done, what was seen, what the checker said.
type Result struct {
	Design       string                 `json:"design"`
	Config       config.Config          `json:"config"`
	ReportDir    string                 `json:"report_dir"`
	Started      time.Time              `json:"started"`
	LoadStart    time.Time              `json:"load_start"`
	LoadEnd      time.Time              `json:"load_end"`
	Finished     time.Time              `json:"finished"`
	Ops          OpStats                `json:"ops"`
	Orders       OrderStats             `json:"orders"`
	Faults       []check.Fault          `json:"faults"`
	FaultCounts  []FaultCount           `json:"fault_counts"`
	Budgets      []config.Budget        `json:"budgets,omitempty"` // the retry budgets the outages had to outlast
	Outages      []OutageReport         `json:"outages,omitempty"` // each outage's length against its budget
	Processes    []harness.ProcessStats `json:"processes"`
	Quiet        Quiet                  `json:"quiet"`
	Series       []Point                `json:"series"`
	Verdicts     []check.Verdict        `json:"verdicts"`
	Violations   int                    `json:"violations"`
	Passed       bool                   `json:"passed"`
	DelayedSends int64                  `json:"delayed_sends"` // sends that waited for the in-flight cap
	Posts        PostStats              `json:"posts"`         // every POST /orders attempt: accepted, shed, timed out (loadreport.go)
	// OutboxRecovery is each fault's recovery of the outboxes (invariant 12's samples):
	// from its end to a publication again and to the drain of what was written before.
	OutboxRecovery []check.FaultRecovery `json:"outbox_recovery,omitempty"`
	Soak           *SoakReport           `json:"soak,omitempty"` // make soak's windows and verdict (soak.go)
}
