package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// MaxHeaderBytes bounds a request's header lines (64 KiB, against Go's 1 MiB default):
// no request here needs more than an Idempotency-Key and a traceparent, and a server that
// reads a megabyte of headers for each of many slow clients is one an attacker can fill.
const MaxHeaderBytes = 64 << 10

// WriteTimeout bounds how long a handler may take to answer. A handler that waits on
// purpose (the email provider's injected latency) must wait less, or the work commits and
// the answer is lost: the ambiguity the provider's fault should make on purpose, not by
// accident.
const WriteTimeout = 30 * time.Second

// ShutdownTimeout bounds how long a stopping server waits for requests in progress.
const ShutdownTimeout = 10 * time.Second

// Serve listens on addr and serves h to the requests for hosts (others are 421, see
// RequireHost) until ctx ends, then stops accepting and waits up to ShutdownTimeout for
// requests in progress, so a SIGTERM does not cut an order's transaction off
// mid-response. ready, if not nil, receives the bound address.
func Serve(ctx context.Context, addr string, hosts Hosts, h http.Handler, log *slog.Logger, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           RequireHost(hosts, h),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      WriteTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	if ready != nil {
		ready(ln.Addr())
	}
	log.InfoContext(ctx, "http listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}
