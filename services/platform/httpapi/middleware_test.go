package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

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
