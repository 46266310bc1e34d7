package load

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// Go's transport sends a request with an Idempotency-Key again by itself when the
// kept-alive connection it went on breaks before an answer; if that second dial is
// refused, the error says "refused" though the first may have placed the order. The
// load must take such an attempt as ambiguous, not as never sent.
func TestARefusedRetryOfTheTransportIsNotANeverSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reqs atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reqs.Add(1) == 1 {
			w.WriteHeader(http.StatusCreated) // the first request keeps its connection alive
			return
		}
		// The second was received (and could have placed an order), then its connection
		// breaks and nobody listens any more: the transport's own retry is refused.
		ln.Close()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})}
	go srv.Serve(ln)
	defer srv.Close()
	cfg := config.Default
	cfg.Orders = 1
	l := Plan(cfg, []uuid.UUID{uuid.New()}, []string{"http://" + ln.Addr().String()})
	ctx := context.Background()
	if a := l.postTo(ctx, l.baseURL(0), "/orders", "k", []byte(`{}`)); a.Status != http.StatusCreated {
		t.Fatalf("first: %+v", a)
	}
	a := l.postTo(ctx, l.baseURL(0), "/orders", "k", []byte(`{}`))
	if a.err == nil {
		t.Fatalf("second: no error (%d)", a.Status)
	}
	if a.refused() {
		t.Errorf("an attempt the server received counts as refused (never sent): %v", a.err)
	}
}

// A 503 whose detail says ordering's database connection broke under the request
// (database-connection-lost) may hide a placed order: its commit may have gone through.
// The operation whose every later try is shed (database-unreachable: nothing done) is
// then unknown, not failed; the checker would otherwise count the order that exists as
// placed for an operation the client was told failed.
func TestAnOperationWhoseConnectionBrokeUnderItAndWasThenShedIsUnknown(t *testing.T) {
	var tries atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		if tries.Add(1) == 1 {
			_, _ = w.Write([]byte(`{"status":503,"detail":"database-connection-lost: the connection to the database broke under the request"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":503,"detail":"database-unreachable: the database could not be reached; nothing was done"}`))
	}))
	defer srv.Close()
	cfg := config.Default
	cfg.Orders = 1
	l := Plan(cfg, []uuid.UUID{uuid.New()}, []string{srv.URL})
	op := &l.Ops[0]
	l.place(context.Background(), op)
	if op.Outcome != check.OutcomeUnknown {
		t.Errorf("outcome %s after %d tries (%s), want unknown: the first try's commit may have gone through", op.Outcome, op.Attempts, op.Error)
	}

	// Every try shed before it did anything: failed, as before.
	tries.Store(1)
	op2 := &check.ClientOp{Key: "k2", Email: op.Email, Lines: op.Lines}
	l.place(context.Background(), op2)
	if op2.Outcome != check.OutcomeFailed {
		t.Errorf("outcome %s when every try was shed before doing anything, want failed", op2.Outcome)
	}
}
