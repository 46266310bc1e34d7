package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

func TestIdempotencyKeyHeaderIsOptionalPrintableAndAtMost255(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		headers []string
		want    string
		bad     bool
	}{
		{name: "absent"},
		{name: "one printable key", headers: []string{"order/42/order-confirmed"}, want: "order/42/order-confirmed"},
		{name: "255 characters", headers: []string{strings.Repeat("k", 255)}, want: strings.Repeat("k", 255)},
		{name: "space and tilde are printable", headers: []string{" ~"}, want: " ~"},
		{name: "empty", headers: []string{""}, bad: true},
		{name: "256 characters", headers: []string{strings.Repeat("k", 256)}, bad: true},
		{name: "a tab", headers: []string{"tab\tkey"}, bad: true},
		{name: "DEL", headers: []string{"del\x7f"}, bad: true},
		{name: "not ASCII", headers: []string{"é"}, bad: true},
		{name: "two headers", headers: []string{"a", "b"}, bad: true},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		for _, h := range c.headers {
			r.Header.Add("Idempotency-Key", h)
		}
		key, p := httpapi.IdempotencyKey(r)
		switch {
		case c.bad && (p == nil || p.Status != http.StatusBadRequest || len(p.Errors) != 1 || p.Errors[0].Field != "Idempotency-Key"):
			t.Errorf("%s: problem %+v, want a 400 naming Idempotency-Key", c.name, p)
		case c.bad && key != "":
			t.Errorf("%s: key %q returned with a problem", c.name, key)
		case !c.bad && (p != nil || key != c.want):
			t.Errorf("%s: %q %+v, want %q and no problem", c.name, key, p, c.want)
		}
	}
}

func TestIdempotencyKeyProblems(t *testing.T) {
	t.Parallel()
	err := errors.New("key k is in use")
	if p := httpapi.IdempotencyKeyInFlight(err); p.Status != http.StatusConflict || p.Detail != "key k is in use; retry after it completes" ||
		p.Type != httpapi.ProblemType+"idempotency-key-in-flight" {
		t.Errorf("in flight: %+v", p)
	}
	if p := httpapi.IdempotencyKeyReused(err); p.Status != http.StatusUnprocessableEntity || p.Detail != err.Error() ||
		p.Type != httpapi.ProblemType+"idempotency-key-reused" || len(p.Errors) != 1 || p.Errors[0].Field != "Idempotency-Key" {
		t.Errorf("reused: %+v", p)
	}
}

func TestRequiredQueryAndQueryUUID(t *testing.T) {
	t.Parallel()
	const id = "018f2b1e-0000-7000-8000-000000000001"
	for _, c := range []struct {
		query  string
		status int // 0: no problem
	}{
		{"?order_id=" + id, 0},
		{"", http.StatusBadRequest},
		{"?order_id=", http.StatusBadRequest},
		{"?order_id=42", http.StatusBadRequest},
	} {
		r := httptest.NewRequest(http.MethodGet, "/notifications"+c.query, nil)
		got, p := httpapi.QueryUUID(r, "order_id")
		switch {
		case c.status == 0 && (p != nil || got.String() != id):
			t.Errorf("%q: %v %+v, want %s", c.query, got, p, id)
		case c.status != 0 && (p == nil || p.Status != c.status || len(p.Errors) != 1 || p.Errors[0].Field != "order_id"):
			t.Errorf("%q: problem %+v, want %d naming order_id", c.query, p, c.status)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/emails", nil)
	if _, p := httpapi.RequiredQuery(r, "to"); p == nil || p.Detail != "to: the query parameter is required" || p.Errors[0].Detail != "is required" {
		t.Errorf("missing to: %+v", p)
	}
}

func TestPathUUIDRefusesWhatIsNotAUUID(t *testing.T) {
	t.Parallel()
	const id = "018f2b1e-0000-7000-8000-000000000001"
	for _, c := range []struct {
		value string
		ok    bool
	}{{id, true}, {"42", false}, {"", false}} {
		rctx := chi.NewRouteContext()
		rctx.URLParams.Add("id", c.value)
		r := httptest.NewRequest(http.MethodGet, "/books/"+c.value, nil)
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		got, p := httpapi.PathUUID(r, "id")
		switch {
		case c.ok && (p != nil || got.String() != id):
			t.Errorf("%q: %v %+v", c.value, got, p)
		case !c.ok && (p == nil || p.Status != http.StatusBadRequest || p.Errors[0].Field != "id"):
			t.Errorf("%q: problem %+v, want 400 naming id", c.value, p)
		}
	}
}
