// Package telemetry sets up what lets a reader follow one order through four processes:
// JSON logs that carry the trace id, OpenTelemetry traces exported over OTLP when an
// endpoint is configured, and OpenTelemetry metrics served in Prometheus text format.
//
// It closes the "it was lost somewhere" failure of a distributed system: every hop of an
// order (HTTP request, transaction, outbox relay, consumer, provider call) is a span of
// one trace, and every gauge that says something is stuck (oldest unpublished event,
// DLQ depth) is on /metrics.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Propagator carries W3C trace context (and baggage) across HTTP and AMQP.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Telemetry is one service's logger, tracer and meter providers and metrics endpoint.
// Each service gets its own, not the OpenTelemetry globals, so a test can run all four
// services in one process and still tell their spans apart.
type Telemetry struct {
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Metrics        http.Handler
	// TrustIncoming makes an incoming request's trace context its span's parent; false:
	// a link, and the request starts a trace of its own (OTEL_TRUST_INCOMING).
	TrustIncoming bool

	shutdown []func(context.Context) error
}

// Options configures Setup. Zero values work: JSON logs at info, local tracing.
type Options struct {
	Service      string
	LogLevel     string // debug, info, warn, error
	OTLPEndpoint string // OTEL_EXPORTER_OTLP_ENDPOINT; empty keeps traces in the process
	Stdout       io.Writer
	// SpanExporter, when set, receives every span synchronously (tests use an in-memory one).
	SpanExporter sdktrace.SpanExporter
	// TrustIncoming: see Telemetry.TrustIncoming.
	TrustIncoming bool
}

// Setup builds the service's telemetry. Call Shutdown to flush spans on exit.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	res := resource.NewSchemaless(semconv.ServiceName(opts.Service))

	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if opts.OTLPEndpoint != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpointURL(opts.OTLPEndpoint)))
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	}
	if opts.SpanExporter != nil {
		tpOpts = append(tpOpts, sdktrace.WithSyncer(opts.SpanExporter))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	// No exemplars: /metrics is the Prometheus text format, which has none to show, and
	// an exemplar keeps the attributes a view dropped (a client's Host among them).
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(exp),
		sdkmetric.WithView(httpServerView), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))

	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(orDefault(opts.LogLevel, "info")))); err != nil {
		return nil, fmt.Errorf("telemetry: LOG_LEVEL %q: %w", opts.LogLevel, err)
	}
	out := opts.Stdout
	if out == nil {
		out = io.Discard
	}
	h := slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level})
	logger := slog.New(traceHandler{h}).With("service", opts.Service)

	return &Telemetry{
		Logger:         logger,
		TracerProvider: tp,
		MeterProvider:  mp,
		Metrics:        promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		TrustIncoming:  opts.TrustIncoming,
		shutdown:       []func(context.Context) error{tp.Shutdown, mp.Shutdown},
	}, nil
}

// HTTPServerLabels are the only attributes the HTTP server metrics keep: the route's
// pattern (/orders/{id}), the method (otelhttp names any method outside the standard
// ones _OTHER) and the status. Each has a few values the services choose, whatever a
// client sends.
var HTTPServerLabels = []attribute.Key{"http.route", "http.request.method", "http.response.status_code"}

// httpServerView keeps HTTPServerLabels on otelhttp's server instruments and drops the
// rest. otelhttp adds server.address and server.port from the request's Host header,
// which a client writes: a thousand made-up hosts were a thousand series each, megabytes
// of /metrics, until the SDK's cardinality limit counted every later request, real ones
// too, under otel_metric_overflow.
var httpServerView = sdkmetric.NewView(
	sdkmetric.Instrument{Name: "http.server.*", Scope: instrumentation.Scope{Name: otelhttp.ScopeName}},
	sdkmetric.Stream{AttributeFilter: attribute.NewAllowKeysFilter(HTTPServerLabels...)},
)

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// Tracer returns a named tracer of this service.
func (t *Telemetry) Tracer(name string) trace.Tracer { return t.TracerProvider.Tracer(name) }

// Meter returns a named meter of this service.
func (t *Telemetry) Meter(name string) metric.Meter { return t.MeterProvider.Meter(name) }

func endpointURL(s string) string {
	if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		return strings.TrimSuffix(s, "/") + "/v1/traces"
	}
	return "http://" + strings.TrimSuffix(s, "/") + "/v1/traces"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// traceHandler adds trace_id and span_id to every record logged with a context that
// carries a span, so a log line leads straight to its trace in Jaeger.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
