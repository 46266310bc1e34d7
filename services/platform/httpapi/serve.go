package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
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

// MaxConns bounds the connections one listener holds open. Past it, a new connection
// takes the place of the one idle longest (a keep-alive between requests, or one that
// has sent nothing yet), and is closed at once only when every one is busy with a
// request. An idle connection costs a server about 23 KB and a file descriptor, so
// without a bound one client holding connections open would choose the service's memory
// and could use up its descriptors (accept4: too many open files), /healthz's with them.
const MaxConns = 1024

// IdleTimeout is how long a keep-alive connection may wait for its next request: long
// enough for a caller's next request to reuse it, short enough that a client cannot
// hold connections open for minutes by sending a request now and then.
const IdleTimeout = 15 * time.Second

// Serve listens on addr and serves h to the requests for hosts (others are 421, see
// RequireHost), holding at most MaxConns connections and none idle past IdleTimeout,
// until ctx ends, then stops accepting and waits up to ShutdownTimeout for
// requests in progress, so a SIGTERM does not cut an order's transaction off
// mid-response. ready, if not nil, receives the bound address.
func Serve(ctx context.Context, addr string, hosts Hosts, h http.Handler, log *slog.Logger, ready func(net.Addr)) error {
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ln := newLimitListener(tcp, MaxConns)
	srv := &http.Server{
		Handler:           closeAfterTransferCoding(RequireHost(hosts, h)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      WriteTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		IdleTimeout:       IdleTimeout,
		ConnState:         ln.track,
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

// limitListener is a listener that holds at most max connections open: a connection
// accepted past it closes the open one idle longest, or itself when every one is busy.
// The server reports each connection's state through track.
type limitListener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]connState
}

// connState is what the server last reported of a connection: busy with a request or
// not, and since when.
type connState struct {
	busy  bool
	since time.Time
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, max: max, conns: map[net.Conn]connState{}}
}

// Accept returns the next connection it has room for, its requests' header sections
// checked (strictConn).
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		sc := &strictConn{Conn: c}
		if l.admit(sc) {
			return sc, nil
		}
		_ = c.Close()
	}
}

// admit registers c, closing the connection idle longest to make room when the listener
// is full; it reports false, registering nothing, when every connection is busy.
func (l *limitListener) admit(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		var oldest net.Conn
		var since time.Time
		for o, st := range l.conns {
			if !st.busy && (oldest == nil || st.since.Before(since)) {
				oldest, since = o, st.since
			}
		}
		if oldest == nil {
			return false
		}
		delete(l.conns, oldest)
		_ = oldest.Close()
	}
	l.conns[c] = connState{since: time.Now()}
	return true
}

// track is the server's ConnState hook: it keeps each connection's state, and forgets
// the closed ones.
func (l *limitListener) track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	case http.StateActive:
		if _, ok := l.conns[c]; ok {
			l.conns[c] = connState{busy: true, since: time.Now()}
		}
	case http.StateIdle:
		if _, ok := l.conns[c]; ok {
			l.conns[c] = connState{since: time.Now()}
		}
	}
}

// closeAfterTransferCoding closes the connection after answering a request whose body
// came in a transfer coding (chunked). net/http reads such a body by its coding and drops
// a Content-Length sent beside it, as RFC 9112 §6.3 asks, but keeps the connection open,
// where the RFC says it must be closed: a proxy in front that went by the Content-Length
// would have forwarded the rest of the bytes as a request of their own (smuggling). The
// Content-Length is gone by the time a handler runs, so every request with a transfer
// coding closes its connection; the services' own clients send sized bodies.
func closeAfterTransferCoding(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
