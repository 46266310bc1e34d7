package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// BenchmarkRequireHost measures what the Host check adds to a request: the same request
// to a handler that does nothing, plain and behind RequireHost, for a name HTTP_HOSTS
// lists (compose's and k8s's case) and a loopback address (make run's). The difference
// of the two ns/op is the check's price; an order costs about 6 ms of CPU in all
// (docs/performance.md), so good is well under a microsecond.
func BenchmarkRequireHost(b *testing.B) {
	hosts, err := httpapi.ParseHosts("ordering,ordering.bookstore.svc.cluster.local")
	if err != nil {
		b.Fatal(err)
	}
	nothing := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, host := range []string{"ordering.bookstore.svc.cluster.local:8081", "127.0.0.1:8081"} {
		for _, h := range []struct {
			name    string
			handler http.Handler
		}{{"plain", nothing}, {"checked", httpapi.RequireHost(hosts, nothing)}} {
			b.Run(host+"/"+h.name, func(b *testing.B) {
				r := httptest.NewRequest(http.MethodPost, "http://"+host+"/orders", nil)
				w := httptest.NewRecorder()
				b.ReportAllocs()
				for b.Loop() {
					h.handler.ServeHTTP(w, r)
				}
				if w.Code != http.StatusOK {
					b.Fatalf("answered %d", w.Code)
				}
			})
		}
	}
}
