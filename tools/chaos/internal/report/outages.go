package report

import (
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// OutageReport is one outage set against the budget it had to outlast.
type OutageReport struct {
	FaultID   int           `json:"fault_id"`
	Kind      string        `json:"kind"`
	At        time.Duration `json:"at_ns"`     // from the start of the load
	Length    time.Duration `json:"length_ns"` // measured: from the last link down to the first link up
	Budget    string        `json:"budget"`    // its name
	BudgetMax time.Duration `json:"budget_max_ns"`
	Required  bool          `json:"required"` // the run shrank the budget so that this outage must outlast it
	Outlasted bool          `json:"outlasted"`
	Hit       bool          `json:"hit"`
}

// OutageReports sets every outage that started against its budget.
func OutageReports(cfg config.Config, faults []check.Fault, loadStart time.Time) []OutageReport {
	var out []OutageReport
	for _, f := range faults {
		b, ok := cfg.BudgetOf(f.Kind)
		if !ok || f.Start.IsZero() {
			continue
		}
		length := f.End.Sub(f.Start)
		out = append(out, OutageReport{
			FaultID: f.ID, Kind: f.Kind, At: f.Start.Sub(loadStart), Length: length,
			Budget: b.Name, BudgetMax: b.Max, Required: b.Shrunk, Outlasted: f.Fired && length > b.Max, Hit: f.Fired,
		})
	}
	return out
}
