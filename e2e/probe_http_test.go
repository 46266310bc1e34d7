package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/testenv"
)

// raw sends one request to url with Host host (the URL's when "") and returns its status,
// Content-Type and body.
func raw(t *testing.T, client *http.Client, method, url, host string, header []string, body io.Reader) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %.80s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// The second security probe against the running system: what a client
// controls (Host, the size of a request's errors, its path, its trace context) stays
// bounded, and a cancel without a body is taken.
func TestTheSecondProbeFindsEveryClientControlledValueBounded(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	s.setStock(bookID(1), "Dune", 10)

	// A Host the service does not answer to is a 421 problem, on every
	// service and every path, probes included; localhost with any port is answered.
	// The contract checker sees each 421 (api/openapi lists it on every operation, and
	// checks it against the document's Misdirected answer on a path none has).
	t.Run("HostIsChecked", func(t *testing.T) {
		for _, name := range services {
			u, _ := url.Parse(s.URL[name])
			for _, path := range []string{"/healthz", "/readyz", "/metrics", "/nowhere"} {
				status, contentType, body := raw(t, http.DefaultClient, http.MethodGet, s.URL[name]+path, "rebound.evil.example:"+u.Port(), nil, nil)
				if status != http.StatusMisdirectedRequest || contentType != "application/problem+json" || !strings.Contains(body, "#misdirected") {
					t.Errorf("%s %s for rebound.evil.example: %d %s %.200s, want a 421 problem", name, path, status, contentType, body)
				}
			}
			if status, _, body := raw(t, http.DefaultClient, http.MethodGet, s.URL[name]+"/healthz", "localhost:"+u.Port(), nil, nil); status != http.StatusOK {
				t.Errorf("%s /healthz for localhost: %d %.200s", name, status, body)
			}
		}
	})

	// 1,000 requests naming 1,000 ports of localhost (each its own
	// server_port label before) leave /metrics the size it was.
	t.Run("HostsMakeNoMetricSeries", func(t *testing.T) {
		metrics := func() string {
			_, _, body := raw(t, http.DefaultClient, http.MethodGet, s.URL["ordering"]+"/metrics", "", nil, nil)
			return body
		}
		// A request of each route first, so their own series are there before.
		raw(t, http.DefaultClient, http.MethodGet, s.URL["ordering"]+"/healthz", "localhost", nil, nil)
		metrics()
		before := metrics()
		for port := 1; port <= 1000; port++ {
			raw(t, http.DefaultClient, http.MethodGet, s.URL["ordering"]+"/healthz", fmt.Sprintf("localhost:%d", port), nil, nil)
		}
		after := metrics()
		if len(after) > len(before)*5/4 {
			t.Errorf("/metrics grew from %d to %d bytes with 1,000 Host ports", len(before), len(after))
		}
		if strings.Contains(after, "otel_metric_overflow") || strings.Contains(after, "server_port") {
			t.Errorf("/metrics has an overflow series or a server_port label")
		}
	})

	// Findings 3 and 5: a 63 KB order of 21,000 empty lines is one error; a 60 KB path is
	// a 404 whose answer and log line hold an excerpt of it.
	t.Run("AnswersAndLogLinesAreBounded", func(t *testing.T) {
		body := `{"customer_email":"ada@example.com","lines":[` + strings.Repeat(`{},`, 20999) + `{}]}`
		status, _, answer := raw(t, http.DefaultClient, http.MethodPost, s.URL["ordering"]+"/orders", "",
			[]string{"Content-Type", "application/json"}, strings.NewReader(body))
		if status != http.StatusUnprocessableEntity || len(answer) > 2<<10 || strings.Count(answer, `"field"`) != 1 {
			t.Errorf("POST /orders with 21,000 empty lines (%d bytes): %d, %d bytes: %.300s", len(body), status, len(answer), answer)
		}
		long := "/" + strings.Repeat("a", 60<<10)
		status, _, answer = raw(t, http.DefaultClient, http.MethodGet, s.URL["ordering"]+long, "", nil, nil)
		if status != http.StatusNotFound || len(answer) > 2<<10 {
			t.Errorf("GET a 60 KB path: %d, %d bytes", status, len(answer))
		}
		// The log line is written after the answer is sent.
		testenv.Eventually(t, 10*time.Second, "ordering logged the 404", func() bool {
			return strings.Contains(s.logs("ordering"), `"status":404`)
		})
		for line := range strings.SplitSeq(s.logs("ordering"), "\n") {
			if len(line) > 4<<10 {
				t.Errorf("a %d-byte log line: %.200s…", len(line), line)
			}
		}
	})

	// curl -X POST .../cancel, no body, cancels; the same from a page of
	// another origin is refused.
	t.Run("ACancelWithoutABodyIsTaken", func(t *testing.T) {
		o := s.placeOrder("cancel-nobody@example.com", line{BookID: bookID(1), Quantity: 1})
		status, _, answer := raw(t, http.DefaultClient, http.MethodPost, s.URL["ordering"]+"/orders/"+o.ID+"/cancel", "",
			[]string{"Origin", "https://evil.example"}, nil)
		if status != http.StatusForbidden {
			t.Errorf("a bodyless cancel from another origin: %d %.200s, want 403", status, answer)
		}
		status, _, answer = raw(t, http.DefaultClient, http.MethodPost, s.URL["ordering"]+"/orders/"+o.ID+"/cancel", "", nil, nil)
		if status != http.StatusOK || !strings.Contains(answer, `"cancelled"`) {
			t.Errorf("POST /orders/%s/cancel without a body: %d %.200s, want 200 cancelled", o.ID, status, answer)
		}
	})

	// A client's traceparent and tracestate do not reach the outbox; the
	// order's events carry a trace of ordering's own.
	t.Run("AClientsTraceIsNotStored", func(t *testing.T) {
		const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		status, _, answer := raw(t, http.DefaultClient, http.MethodPost, s.URL["ordering"]+"/orders", "", []string{
			"Content-Type", "application/json",
			"traceparent", "00-" + clientTrace + "-00f067aa0ba902b7-01",
			"tracestate", "a=" + strings.Repeat("v", 212) + ",b=" + strings.Repeat("w", 211),
		}, strings.NewReader(`{"customer_email":"trace-probe@example.com","lines":[{"book_id":"`+bookID(1)+`","quantity":1}]}`))
		if status != http.StatusCreated {
			t.Fatalf("POST /orders: %d %.200s", status, answer)
		}
		conn, err := pgx.Connect(t.Context(), s.DB["ordering"])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		var traceparent, tracestate string
		if err := conn.QueryRow(t.Context(), `SELECT traceparent, tracestate FROM outbox WHERE event_type LIKE 'ordering.order-placed%' ORDER BY created_at DESC LIMIT 1`).Scan(&traceparent, &tracestate); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(traceparent, clientTrace) || tracestate != "" || traceparent == "" {
			t.Errorf("the outbox row has traceparent %q and a %d-byte tracestate, want a trace of ordering's own and none", traceparent, len(tracestate))
		}
	})
}
