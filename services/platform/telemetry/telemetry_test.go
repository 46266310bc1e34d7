package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
)

// A log line written inside a span carries its trace and span ids, so a line in the logs
// leads to its trace; a line outside any span carries none.
func TestLogLinesCarryTheTraceID(t *testing.T) {
	var out strings.Builder
	tel, err := Setup(context.Background(), Options{Service: "test", Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	ctx, span := tel.Tracer("test").Start(context.Background(), "work")
	tel.Logger.InfoContext(ctx, "inside")
	span.End()
	tel.Logger.InfoContext(context.Background(), "outside")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines: %q", out.String())
	}
	var inside, outside map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &inside); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &outside); err != nil {
		t.Fatal(err)
	}
	if inside["trace_id"] != span.SpanContext().TraceID().String() || inside["span_id"] != span.SpanContext().SpanID().String() {
		t.Errorf("inside a span: %v, want trace %s", inside, span.SpanContext().TraceID())
	}
	if inside["service"] != "test" {
		t.Errorf("no service attribute: %v", inside)
	}
	if _, ok := outside["trace_id"]; ok {
		t.Errorf("outside any span: %v", outside)
	}
}

// Metrics recorded through the service's meter are served in Prometheus text format.
func TestMetricsAreServedInPrometheusFormat(t *testing.T) {
	tel, err := Setup(context.Background(), Options{Service: "test", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tel.Meter("test").Int64Counter("bookstore.test.things", metric.WithDescription("Things."))
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	rec := httptest.NewRecorder()
	tel.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "bookstore_test_things_total 3") {
		t.Errorf("/metrics lacks the counter:\n%s", rec.Body.String())
	}
}

func TestBadLogLevelIsRefused(t *testing.T) {
	if _, err := Setup(context.Background(), Options{Service: "test", LogLevel: "loud"}); err == nil {
		t.Error("LOG_LEVEL=loud accepted")
	}
}
