package load

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

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
