package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
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

// Readyz answers 200 when every check passes within a second, and 503 naming the ones
// that failed otherwise.
func Readyz(checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		status, out := http.StatusOK, map[string]string{}
		for _, c := range checks {
			if err := c.Ping(ctx); err != nil {
				status, out[c.Name] = http.StatusServiceUnavailable, err.Error()
				continue
			}
			out[c.Name] = "ok"
		}
		WriteJSON(w, status, out)
	})
}

// Probes mounts the endpoints every service serves beside its API: /healthz, /readyz
// (answered by ready) and /metrics.
func Probes(r chi.Router, metrics http.Handler, ready ...Check) {
	r.Method(http.MethodGet, "/healthz", Healthz())
	r.Method(http.MethodGet, "/readyz", Readyz(ready...))
	r.Method(http.MethodGet, "/metrics", metrics)
}
