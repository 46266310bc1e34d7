package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
)

// ServeProfiles serves net/http/pprof on addr until ctx ends; an empty addr serves
// nothing. The profiles get a listener of their own, never the API's: they show the
// process's internals and a CPU profile costs the process while it runs, so they are
// opened only when an operator asks, and bound where the operator says (loopback, as a
// rule), and answer only to loopback names.
func ServeProfiles(ctx context.Context, addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.WarnContext(ctx, "serving profiles: PPROF_ADDR is set", "pprof_addr", addr)
	return Serve(ctx, addr, Hosts{}, mux, log, nil) // kubectl port-forward sends localhost
}
