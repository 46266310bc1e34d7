package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

func instrumented(t *testing.T, log io.Writer) (http.Handler, *telemetry.Telemetry) {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "test", Stdout: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return httpapi.Instrument(tel, exampleAPI()), tel
}

func scrape(t *testing.T, tel *telemetry.Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.Metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// httpSeries matches one series of the HTTP server metrics and captures its labels.
var httpSeries = regexp.MustCompile(`(?m)^http_server_[a-z_]+\{(.*)\} `)

// labelName matches a label's name at the start of each name="value" pair.
var labelName = regexp.MustCompile(`(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)="`)

// The HTTP metrics' labels come from a fixed set (the route's pattern, the method and
// the status), never from what a client sends: 1,000 requests, each with its own Host,
// leave /metrics the size it was, and no series overflows the SDK's cardinality limit.
func TestAThousandHostsLeaveTheMetricsTheirSize(t *testing.T) {
	t.Parallel()
	api, tel := instrumented(t, nil)
	send := func(host string) {
		req := httptest.NewRequest(http.MethodGet, "/orders/1", nil)
		req.Host = host
		api.ServeHTTP(httptest.NewRecorder(), req)
	}
	send("localhost:8081")
	before := scrape(t, tel)
	for i := range 1000 {
		send(fmt.Sprintf("h%d.%s.example:%d", i, strings.Repeat("x", 200), 1+i))
	}
	after := scrape(t, tel)
	if len(after) > len(before)*5/4 {
		t.Errorf("/metrics grew from %d to %d bytes with 1,000 Host values", len(before), len(after))
	}
	if strings.Contains(after, "otel_metric_overflow") {
		t.Errorf("/metrics has an overflow series")
	}
	allowed := map[string]bool{"http_route": true, "http_request_method": true, "http_response_status_code": true, "le": true}
	seen := 0
	for _, m := range httpSeries.FindAllStringSubmatch(after, -1) {
		seen++
		for _, l := range labelName.FindAllStringSubmatch(m[1], -1) {
			if !allowed[l[1]] {
				t.Errorf("an HTTP series has the label %s, outside the fixed set: %s", l[1], m[0])
				return
			}
		}
		if !strings.Contains(m[1], `http_route="/orders/{id}"`) {
			t.Errorf("an HTTP series lacks the route's pattern: %s", m[0])
			return
		}
	}
	if seen == 0 {
		t.Fatalf("no HTTP series in /metrics:\n%s", after)
	}
}

// What a client sends reaches a log line or a problem only in part: a 60 KB path asked
// for is a 404 whose access log line and problem detail each hold an excerpt of it.
func TestALongPathIsLoggedAndEchoedOnlyInPart(t *testing.T) {
	t.Parallel()
	var log strings.Builder
	api, _ := instrumented(t, &log)
	long := "/" + strings.Repeat("a", 60<<10)
	for _, c := range []struct{ method, path, contentType string }{
		{http.MethodGet, long, ""},                                        // 404 no resource at ...
		{http.MethodDelete, "/orders/" + strings.Repeat("b", 60<<10), ""}, // 405 ... is not allowed on ...
		{http.MethodPost, "/orders", "text/" + strings.Repeat("c", 60<<10)},
	} {
		log.Reset()
		a := call(t, api, c.method, c.path, c.contentType, `{}`)
		if a.status < 400 || a.problem.Status != a.status {
			t.Fatalf("%s %.40s…: %d %.200s, want a problem", c.method, c.path, a.status, a.body)
		}
		if len(a.body) > 2<<10 {
			t.Errorf("%s %.40s…: a %d-byte problem: %.300s…", c.method, c.path, len(a.body), a.body)
		}
		if len(log.String()) > 2<<10 {
			t.Errorf("%s %.40s…: a %d-byte log line: %.300s…", c.method, c.path, len(log.String()), log.String())
		}
		if !strings.Contains(log.String(), `"path":"/`) {
			t.Errorf("%s %.40s…: the log line names no path: %.300s", c.method, c.path, log.String())
		}
	}
}

// A problem lists at most MaxProblemErrors of its fields, and names how many more there
// were; each field and detail it lists, and its own detail, are excerpts.
func TestAProblemListsABoundedNumberOfErrors(t *testing.T) {
	t.Parallel()
	fields := map[string]string{}
	for i := range 21000 {
		fields[fmt.Sprintf("lines[%d].book_id", i)] = "is required " + strings.Repeat("z", 1000)
	}
	rec := httptest.NewRecorder()
	httpapi.WriteProblem(rec, httpapi.Invalid(fields))
	var p httpapi.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Errors) > httpapi.MaxProblemErrors || len(p.Errors) == 0 {
		t.Errorf("%d errors listed, want 1 to %d", len(p.Errors), httpapi.MaxProblemErrors)
	}
	if rec.Body.Len() > 16<<10 {
		t.Errorf("a %d-byte problem for 21,000 fields", rec.Body.Len())
	}
	if !strings.Contains(p.Detail, "more") {
		t.Errorf("the detail does not say more fields were left out: %.300s", p.Detail)
	}
}

// clientTrace is a traceparent and a 428-byte tracestate, as a client may send them.
const clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

var clientTracestate = "a=" + strings.Repeat("v", 212) + ",b=" + strings.Repeat("w", 211)

func tracedRequest(t *testing.T, trust bool) tracetest.SpanStub {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "test", SpanExporter: exp, TrustIncoming: trust})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	req := httptest.NewRequest(http.MethodGet, "/orders/1", nil)
	req.Header.Set("traceparent", "00-"+clientTraceID+"-00f067aa0ba902b7-01")
	req.Header.Set("tracestate", clientTracestate)
	httpapi.Instrument(tel, exampleAPI()).ServeHTTP(httptest.NewRecorder(), req)
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want the request's one", len(spans))
	}
	return spans[0]
}

// A client does not choose the trace a request joins: its traceparent is a link of the
// request's span, which starts a trace of its own (and so does what the request writes
// to the outbox), and its tracestate is dropped.
func TestAClientsTraceIsALinkNotTheParent(t *testing.T) {
	t.Parallel()
	s := tracedRequest(t, false)
	if s.Parent.IsValid() || s.SpanContext.TraceID().String() == clientTraceID {
		t.Errorf("the request's span continues the client's trace %s (parent %s)", s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID().String() != clientTraceID {
		t.Errorf("links %+v, want one to the client's span", s.Links)
	}
	if ts := s.SpanContext.TraceState().String(); ts != "" {
		t.Errorf("the span carries the client's tracestate (%d bytes)", len(ts))
	}
}

// A trusted caller (OTEL_TRUST_INCOMING=1: the system's own services) continues its
// trace, but a tracestate over MaxTracestateBytes is dropped, not stored in the outbox.
func TestATrustedCallersTraceIsTheParentWithABoundedTracestate(t *testing.T) {
	t.Parallel()
	s := tracedRequest(t, true)
	if s.Parent.TraceID().String() != clientTraceID || s.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("parent %s/%s, want the caller's span", s.Parent.TraceID(), s.Parent.SpanID())
	}
	if ts := s.SpanContext.TraceState().String(); len(ts) > httpapi.MaxTracestateBytes {
		t.Errorf("the span carries a %d-byte tracestate", len(ts))
	}
	if len(clientTracestate) != 428 {
		t.Fatalf("the client's tracestate is %d bytes, want the probe's 428", len(clientTracestate))
	}
}

// Refused requests are logged at a bounded rate, whatever a client sends: 10,000 404s in
// a burst write a few dozen lines (each saying how many refusals went unlogged before
// it), not 10,000, and every refusal left out of the log is counted in
// bookstore_http_refused_unlogged_total.
func TestRefusedRequestsAreLoggedAtABoundedRate(t *testing.T) {
	t.Parallel()
	var log strings.Builder
	api, tel := instrumented(t, &log)
	const n = 10_000
	start := time.Now()
	for range n {
		api.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/no-such-path", nil))
	}
	elapsed := time.Since(start)
	lines := strings.Count(log.String(), `"msg":"http request"`)
	t.Logf("%d refused requests in %v: %d log lines, %d bytes", n, elapsed, lines, len(log.String()))
	if max := httpapi.RefusedLogBurst + int(elapsed.Seconds()*httpapi.RefusedLogRate) + 1; lines > max {
		t.Errorf("%d refused requests in %v wrote %d log lines, want at most %d", n, elapsed, lines, max)
	}
	if lines == 0 {
		t.Fatalf("no refused request was logged at all")
	}
	m := regexp.MustCompile(`(?m)^bookstore_http_refused_unlogged_total(?:\{[^}]*\})? (\d+)`).FindStringSubmatch(scrape(t, tel))
	if m == nil {
		t.Fatalf("no bookstore_http_refused_unlogged_total in /metrics")
	}
	if unlogged, _ := strconv.Atoi(m[1]); unlogged+lines != n {
		t.Errorf("%d lines and %d counted unlogged, want the %d refusals between them", lines, unlogged, n)
	}
}
