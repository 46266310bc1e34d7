package api

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// BenchmarkAuthenticate measures what the provider's API key check adds to a send: the
// same request to a handler that does nothing, plain and behind authenticate (a SHA-256
// of the key, then a constant-time comparison with each known key's), with 1 key (make
// run's) and 16. It is paid once per send; an order costs about 6 ms of CPU in all
// (docs/performance.md).
func BenchmarkAuthenticate(b *testing.B) {
	const key = "key-0123456789abcdef0123456789abcdef"
	nothing := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, n := range []int{1, 16} {
		spec := "bookstore:" + key
		for i := 1; i < n; i++ {
			spec += ",other" + strconv.Itoa(i) + ":" + key + strconv.Itoa(i)
		}
		keys, err := ParseAPIKeys(spec)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			r := httptest.NewRequest(http.MethodPost, "/emails", nil)
			r.Header.Set("Authorization", "Bearer "+key)
			httpapitest.BenchmarkCheck(b, httpapitest.Handlers{Plain: nothing, Checked: keys.authenticate(nothing)}, r)
		})
	}
}
