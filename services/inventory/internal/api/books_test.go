package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/inventory/internal/api"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// A client that hangs up before inventory answers is no failure of inventory's: the
// query under the request fails of the cancelled context, and the answer, which nobody
// reads, is 499 "client closed request", logged below ERROR, as ordering answers it
// (httpapi.Failed).
func TestARequestWhoseClientHungUpIsAnswered499NotAServerError(t *testing.T) {
	admin, dbURL := testenv.Database(t, "inventory")
	pool, err := pgdb.Open(context.Background(), admin, dbURL, stock.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs bytes.Buffer
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "inventory", Stdout: &logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	svc, err := stock.NewService(pool, tel, stock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewServer(svc, false, tel)

	for _, path := range []string{"/books", "/books/018f2b1e-0000-7000-8000-000000000001", "/orders/018f2b1e-0000-7000-8000-0000000000aa/reservation"} {
		ctx, hangUp := context.WithCancel(context.Background())
		hangUp()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != 499 || !strings.Contains(string(body), "client-closed-request") {
			t.Errorf("GET %s, its client gone: %d %s; want 499 client-closed-request", path, rec.Code, body)
		}
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("a request its client abandoned was logged as an error:\n%s", logs.String())
	}
}
