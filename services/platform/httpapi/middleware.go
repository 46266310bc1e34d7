package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Instrument wraps an API with a server span per request, an access log line carrying the
// trace id (for a request answered 4xx or 5xx, sampled: RefusedLogRate), and recovery
// from a panicking handler. The span continues an incoming
// traceparent only when tel.TrustIncoming; otherwise it links to it.
func Instrument(tel *telemetry.Telemetry, h http.Handler) http.Handler {
	unlogged, err := tel.Meter("httpapi").Int64Counter("bookstore.http.refused.unlogged",
		metric.WithDescription("Requests answered 4xx or 5xx whose access log line was left out, past the log's rate (RefusedLogRate); the HTTP metrics count every request."))
	if err != nil {
		otel.Handle(err)
	}
	refused := &sampler{rate: RefusedLogRate, burst: RefusedLogBurst}
	failed := &sampler{rate: RefusedLogRate, burst: RefusedLogBurst}
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		// chi fills a route context it finds in the request instead of making its own, so
		// after routing we know the pattern (/orders/{id}) and name the span by it: one span
		// name per route, not one per order.
		rctx := chi.NewRouteContext()
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		defer func() {
			if p := rctx.RoutePattern(); p != "" {
				trace.SpanFromContext(r.Context()).SetName(r.Method + " " + p)
				// The pattern is one of the routes mapped, never the path asked for, so
				// it is a label of the HTTP metrics (telemetry.HTTPServerLabels).
				if l, ok := otelhttp.LabelerFromContext(r.Context()); ok {
					l.Add(semconv.HTTPRoute(p))
				}
			}
			if v := recover(); v != nil {
				tel.Logger.ErrorContext(r.Context(), "handler panicked", "panic", v, "path", Excerpt(r.URL.Path))
				internal(rec)
			}
			// One line per request that went wrong; every other request is a debug line
			// (LOG_LEVEL=debug). A line per order costs more than the order's own SQL at
			// a few hundred orders a second, and the trace and the metrics already
			// count every request.
			// A request that went wrong is a client's to repeat as fast as it likes, so
			// those lines are sampled: at most RefusedLogBurst at once and RefusedLogRate
			// a second after that, each saying how many went unlogged before it, which
			// bookstore_http_refused_unlogged_total counts too.
			level := slog.LevelDebug
			var s *sampler
			switch {
			case rec.status >= 500:
				level, s = slog.LevelError, failed
			case rec.status >= 400:
				level, s = slog.LevelInfo, refused
			}
			attrs := []any{"method", Excerpt(r.Method), "path", Excerpt(r.URL.Path),
				"status", rec.status, "duration_ms", time.Since(start).Milliseconds()}
			if s != nil {
				ok, skipped := s.take(time.Now())
				if !ok {
					if unlogged != nil {
						unlogged.Add(r.Context(), 1)
					}
					return
				}
				if skipped > 0 {
					attrs = append(attrs, "unlogged_before", skipped)
				}
			}
			tel.Logger.Log(r.Context(), level, "http request", attrs...)
		}()
		h.ServeHTTP(rec, r)
	})
	return otelhttp.NewHandler(logged, "http",
		otelhttp.WithTracerProvider(tel.TracerProvider),
		otelhttp.WithMeterProvider(tel.MeterProvider),
		otelhttp.WithPropagators(boundedTracestate{telemetry.Propagator}),
		// A caller not trusted (the default) does not choose the trace: its span is a
		// link, and the request's span starts a trace of its own, which the outbox
		// stores with the events the request writes. Otherwise anyone could merge one
		// order's trace into another's.
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return !tel.TrustIncoming }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// MaxTracestateBytes bounds the tracestate a trusted caller's request continues with; a
// longer one is dropped, not stored with every event the request writes to the outbox.
const MaxTracestateBytes = 256

// boundedTracestate extracts as its propagator does, and drops a tracestate over
// MaxTracestateBytes (W3C allows 32 members of 256 bytes each).
type boundedTracestate struct{ propagation.TextMapPropagator }

func (b boundedTracestate) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	ctx = b.TextMapPropagator.Extract(ctx, carrier)
	if sc := trace.SpanContextFromContext(ctx); len(sc.TraceState().String()) > MaxTracestateBytes {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc.WithTraceState(trace.TraceState{}))
	}
	return ctx
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// The access log's sampling of requests that went wrong, per API and per class (4xx,
// 5xx): RefusedLogBurst lines at once, then RefusedLogRate a second. A line is about
// 400 bytes, and one connection can be refused thousands of times a second: unsampled,
// a client would choose how fast the log grows.
const (
	RefusedLogBurst = 20
	RefusedLogRate  = 5.0 // lines a second
)

// sampler is a token bucket of log lines: burst lines at once, rate a second after
// that. It counts what it refused since the last line it let through.
type sampler struct {
	rate  float64
	burst int

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	skipped int
}

// take reports whether a line may be written at now and, if so, how many were refused
// since the last one.
func (s *sampler) take(now time.Time) (ok bool, skipped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.IsZero() {
		s.tokens = float64(s.burst)
	} else {
		s.tokens = min(float64(s.burst), s.tokens+now.Sub(s.last).Seconds()*s.rate)
	}
	s.last = now
	if s.tokens < 1 {
		s.skipped++
		return false, 0
	}
	s.tokens--
	skipped, s.skipped = s.skipped, 0
	return true, skipped
}
