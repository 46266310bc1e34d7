package e2e

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is a minimal OTLP/HTTP trace receiver: what Jaeger does in docker compose,
// done in memory, so the test sees exactly the spans the services export.
type collector struct {
	mu    sync.Mutex
	spans []span
}

type span struct {
	service, name, traceID, spanID, parentID string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				c.spans = append(c.spans, span{service, sp.Name, hex.EncodeToString(sp.TraceId), hex.EncodeToString(sp.SpanId), hex.EncodeToString(sp.ParentSpanId)})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func (c *collector) trace(id string) []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []span
	for _, s := range c.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

// One trace runs from POST /orders through the outbox row, the relay's publish, each
// consumer and the provider call, across all four services, and its spans form one tree.
func TestOneTraceFromOrderToEmail(t *testing.T) {
	t.Parallel()
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	otlp := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}
	// The client here is trusted to start the trace (OTEL_TRUST_INCOMING=1), as the
	// email provider trusts notification's; an untrusted one's traceparent is only a link
	// (TestAClientsTraceIsALinkNotTheParent).
	trusted := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_TRUST_INCOMING": "1"}
	s := startSystem(t, map[string]map[string]string{"ordering": trusted, "inventory": otlp, "notification": otlp, "emailprovider": trusted})
	s.setStock(bookID(1), "Dune", 10)

	req, _ := http.NewRequest(http.MethodPost, s.URL["ordering"]+"/orders",
		stringsReader(`{"customer_email":"trace@example.com","lines":[{"book_id":"`+bookID(1)+`","quantity":1}]}`))
	req.Header.Set("Content-Type", "application/json")
	// The client starts the trace, as a trusted caller with tracing would.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders: %v %v", err, resp.Status)
	}
	var o order
	decode(t, resp, &o)
	s.settled(o.ID, 30*time.Second)
	s.emailed(o.ID, "trace@example.com")

	want := map[string]bool{"ordering": true, "inventory": true, "notification": true, "emailprovider": true}
	var spans []span
	// Spans are exported when they end, in batches: a parent (the consumer's delivery span)
	// may arrive after its children. Wait until the trace is complete, not just begun.
	var broken []span
	complete := func() bool {
		spans = c.trace(traceID)
		seen := map[string]bool{}
		ids := map[string]bool{"00f067aa0ba902b7": true} // the client's span is the root
		for _, sp := range spans {
			seen[sp.service] = true
			ids[sp.spanID] = true
		}
		broken = nil
		for _, sp := range spans {
			if !ids[sp.parentID] {
				broken = append(broken, sp)
			}
		}
		for svc := range want {
			if !seen[svc] {
				return false
			}
		}
		return len(broken) == 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for !complete() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	seen := map[string]bool{}
	for _, sp := range spans {
		seen[sp.service] = true
	}
	for svc := range want {
		if !seen[svc] {
			t.Errorf("no span of %s in the trace", svc)
		}
	}
	for _, sp := range broken {
		t.Errorf("span %s/%q has parent %s, which is not in the trace: the tree is broken", sp.service, sp.name, sp.parentID)
	}
	for _, sp := range spans {
		t.Logf("%-13s %-40s span %s parent %s", sp.service, sp.name, sp.spanID, sp.parentID)
	}
}
