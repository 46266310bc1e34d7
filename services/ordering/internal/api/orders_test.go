package api_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bookstore-go/bookstore/services/ordering/internal/api"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// A client that hangs up before ordering answers (it timed out, or gave up on a process
// frozen while its request waited in the socket) is no failure of ordering's: the
// request's context is cancelled under the use case, and the answer, which nobody reads,
// is 499 "client closed request", logged below ERROR, never a 5xx that counts as the
// service failing (the chaos checker found 19 such 500s from a thawed ordering).
func TestARequestWhoseClientHungUpIsAnswered499NotAServerError(t *testing.T) {
	admin, dbURL := testenv.Database(t, "ordering")
	migrated, err := pgdb.Open(context.Background(), admin, dbURL, orders.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	pool := testenv.Pool(t, dbURL)
	var logs bytes.Buffer
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "ordering", Stdout: &logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	h := api.NewServer(orders.NewService(pool, noop.NewTracerProvider().Tracer(""), slog.New(slog.DiscardHandler), 1), tel)

	for _, c := range []struct{ name, path, body string }{
		{"place", "/orders", `{"customer_email":"ada@example.com","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000001","quantity":1}]}`},
		{"cancel", "/orders/018f2b1e-0000-7000-8000-0000000000aa/cancel", `{}`},
	} {
		ctx, hangUp := context.WithCancel(context.Background())
		hangUp()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "hung-up-"+c.name)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != 499 || !strings.Contains(string(body), "client-closed-request") {
			t.Errorf("%s, its client gone: %d %s; want 499 client-closed-request", c.name, rec.Code, body)
		}
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("a request its client abandoned was logged as an error:\n%s", logs.String())
	}
}
