package provider

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// A batch's sends go out at once; the next batch's find the connections the first one
// opened still there, so under load a send costs no new connection.
func TestConcurrentSendsKeepTheirConnectionsForTheNextBatch(t *testing.T) {
	var dials atomic.Int64
	var arrived sync.WaitGroup
	const batch = 32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived.Done()
		arrived.Wait() // every send of the batch in flight at once, each on its own connection
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"id":"e-%s","idempotency_key":%q,"status":"sent"}`, r.Header.Get("Idempotency-Key"), r.Header.Get("Idempotency-Key"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "provider-test", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(srv.URL, "test-key", 10*time.Second, tel)
	if err != nil {
		t.Fatal(err)
	}

	for round := range 3 {
		arrived.Add(batch)
		var sent sync.WaitGroup
		for i := range batch {
			sent.Go(func() {
				if _, err := c.Send(t.Context(), fmt.Sprintf("order/%d/%d", round, i), Message{To: "a@example.com", Subject: "s", Text: "t"}); err != nil {
					t.Error(err)
				}
			})
		}
		sent.Wait()
	}
	if got := dials.Load(); got != batch {
		t.Fatalf("3 batches of %d concurrent sends opened %d connections, want %d: the first batch's were not kept", batch, got, batch)
	}
}
