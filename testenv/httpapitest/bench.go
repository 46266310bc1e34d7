package httpapitest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Handlers are a handler alone and behind a check, served the same request side by side
// in one run by BenchmarkCheck.
type Handlers struct {
	Plain, Checked http.Handler
}

// BenchmarkCheck serves r to the plain handler and to the checked one, each in a
// sub-benchmark of its own, and fails unless both answer 200: the difference of their
// ns/op is what the check costs a request.
func BenchmarkCheck(b *testing.B, h Handlers, r *http.Request) {
	for _, c := range []struct {
		name    string
		handler http.Handler
	}{{"plain", h.Plain}, {"checked", h.Checked}} {
		b.Run(c.name, func(b *testing.B) {
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				c.handler.ServeHTTP(w, r)
			}
			if w.Code != http.StatusOK {
				b.Fatalf("%s answered %d", c.name, w.Code)
			}
		})
	}
}
