package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Check is one dependency /readyz looks at.
type Check struct {
	Name string
	Ping func(context.Context) error
}

// Healthz answers 200 while the process runs: liveness, never dependent on Postgres or
// RabbitMQ, so an orchestrator does not restart a healthy process during their outage.
func Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// Readyz answers 200 when every check passes within a second, and 503 otherwise, naming
// each check "ok" or "unavailable". Why one failed stays in the log: a connection error
// names the role, the database, the host and the resolver's address, which is a map of
// the inside for anyone who can reach the port.
func Readyz(log *slog.Logger, checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		status, out := http.StatusOK, map[string]string{}
		for _, c := range checks {
			if err := c.Ping(ctx); err != nil {
				log.WarnContext(r.Context(), "not ready", "check", c.Name, "err", err)
				status, out[c.Name] = http.StatusServiceUnavailable, "unavailable"
				continue
			}
			out[c.Name] = "ok"
		}
		w.Header().Set("Cache-Control", "no-store")
		WriteJSON(w, status, out)
	})
}

// Probes mounts the endpoints every service serves beside its API: /healthz, /readyz
// (answered by ready, failures logged to tel's logger) and /metrics.
func Probes(r chi.Router, tel *telemetry.Telemetry, ready ...Check) {
	r.Method(http.MethodGet, "/healthz", Healthz())
	r.Method(http.MethodGet, "/readyz", Readyz(tel.Logger, ready...))
	r.Method(http.MethodGet, "/metrics", tel.Metrics)
}
