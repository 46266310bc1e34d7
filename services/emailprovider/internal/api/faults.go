package api

import (
	"net/http"

	"github.com/bookstore-go/bookstore/services/emailprovider/internal/emails"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// getFaults is GET /admin/faults: the faults in force.
func getFaults(faults *emails.Faults) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, faults.Get())
	}
}

// putFaults is PUT /admin/faults: replace the faults. Refused unless the provider was
// started with EMAILPROVIDER_ADMIN=1, so a deployed provider cannot be broken by accident.
func putFaults(faults *emails.Faults, enabled bool, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !enabled {
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusForbidden, "admin-disabled", "Admin API disabled",
				"start the provider with EMAILPROVIDER_ADMIN=1 to change faults at run time"))
			return
		}
		var s emails.FaultSettings
		if problem := httpapi.DecodeValid(r, &s); problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		faults.Set(s)
		tel.Logger.InfoContext(r.Context(), "faults changed", "fail_rate", s.FailRate, "ambiguous_rate", s.AmbiguousRate, "latency", s.Latency, "refuse_to", s.RefuseTo)
		httpapi.WriteJSON(w, http.StatusOK, faults.Get())
	}
}
