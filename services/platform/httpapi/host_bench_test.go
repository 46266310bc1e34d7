package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// BenchmarkRequireHost measures what the Host check adds to a request: the same request
// to a handler that does nothing, plain and behind RequireHost, for a name HTTP_HOSTS
// lists (compose's and k8s's case) and a loopback address (make run's). An order costs
// about 6 ms of CPU in all (docs/performance.md), so good is well under a microsecond.
func BenchmarkRequireHost(b *testing.B) {
	hosts, err := httpapi.ParseHosts("ordering,ordering.bookstore.svc.cluster.local")
	if err != nil {
		b.Fatal(err)
	}
	nothing := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, host := range []string{"ordering.bookstore.svc.cluster.local:8081", "127.0.0.1:8081"} {
		b.Run(host, func(b *testing.B) {
			httpapitest.BenchmarkCheck(b, httpapitest.Handlers{Plain: nothing, Checked: httpapi.RequireHost(hosts, nothing)},
				httptest.NewRequest(http.MethodPost, "http://"+host+"/orders", nil))
		})
	}
}
