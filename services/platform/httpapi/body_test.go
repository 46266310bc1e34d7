package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// cancelRequest is a body that may be left out, as POST /orders/{id}/cancel's.
type cancelRequest struct{}

func (cancelRequest) Valid() map[string]string { return nil }
func (cancelRequest) BodyOptional()            {}

// placeRequest is a body that must be there.
type placeRequest struct {
	Email string `json:"email"`
}

func (placeRequest) Valid() map[string]string { return nil }

func optionalBodyAPI() http.Handler {
	r := httpapi.NewRouter()
	r.Post("/orders/{id}/cancel", func(w http.ResponseWriter, req *http.Request) {
		var c cancelRequest
		if p := httpapi.DecodeValid(req, &c); p != nil {
			httpapi.WriteProblem(w, p)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "cancelled"})
	})
	r.Post("/orders", func(w http.ResponseWriter, req *http.Request) {
		var o placeRequest
		if p := httpapi.DecodeValid(req, &o); p != nil {
			httpapi.WriteProblem(w, p)
			return
		}
		httpapi.WriteJSON(w, http.StatusCreated, o)
	})
	return r
}

// A POST with no body at all (curl -X POST) is taken where the body is optional; a 415 is
// for a body of another type, and a body that is required is a 400 when missing. A
// browser on another site may send a POST without a body and without asking first, so
// such a request is refused when it says it comes from another origin.
func TestAPostWithoutABodyIsTakenWhereTheBodyIsOptional(t *testing.T) {
	t.Parallel()
	api := optionalBodyAPI()
	for _, c := range []struct {
		name, path, body string
		header           []string
		status           int
	}{
		{"no body, no Content-Type", "/orders/1/cancel", "", nil, http.StatusOK},
		{"no body, declared text/plain", "/orders/1/cancel", "", []string{"Content-Type", "text/plain"}, http.StatusOK},
		{"no body, declared JSON", "/orders/1/cancel", "", []string{"Content-Type", "application/json"}, http.StatusOK},
		{"an empty object", "/orders/1/cancel", "{}", []string{"Content-Type", "application/json"}, http.StatusOK},
		{"a text/plain body", "/orders/1/cancel", "{}", []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"a body without a Content-Type", "/orders/1/cancel", "{}", nil, http.StatusUnsupportedMediaType},
		{"no body where one is required", "/orders", "", nil, http.StatusBadRequest},
		{"no body, from another origin", "/orders/1/cancel", "", []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"no body, from another site", "/orders/1/cancel", "", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"no body, from the same origin", "/orders/1/cancel", "", []string{"Origin", "http://example.com", "Sec-Fetch-Site", "same-origin"}, http.StatusOK},
	} {
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		for i := 0; i+1 < len(c.header); i += 2 {
			req.Header.Set(c.header[i], c.header[i+1])
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.status)
		}
		if c.status >= 400 && rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d is not a problem: %s", c.name, rec.Code, rec.Body)
		}
	}
}
