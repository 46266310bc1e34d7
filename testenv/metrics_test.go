package testenv_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bookstore-go/bookstore/testenv"
)

func TestMetricSumsTheMatchingSeries(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`# HELP bookstore_sent_total Emails sent.
# TYPE bookstore_sent_total counter
bookstore_sent_total{kind="order-confirmed",outcome="found"} 2
bookstore_sent_total{kind="order-rejected",outcome="found"} 3
bookstore_sent_total{kind="order-rejected",outcome="not-found"} 5
bookstore_sent_total_other 100
bookstore_pending 1.5
`))
	}))
	t.Cleanup(srv.Close)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bookstore_sent_total", nil, 10},
		{"bookstore_sent_total", []string{`outcome="found"`}, 5},
		{"bookstore_sent_total", []string{`kind="order-rejected"`, `outcome="not-found"`}, 5},
		{"bookstore_sent_total", []string{`kind="none"`}, 0},
		{"bookstore_pending", nil, 1.5},
		{"bookstore_absent_total", nil, 0},
	} {
		if got := testenv.Metric(t, srv.URL, c.name, c.labels...); got != c.want {
			t.Errorf("Metric(%s, %v) = %v, want %v", c.name, c.labels, got, c.want)
		}
		if _, found := testenv.MetricOK(t, srv.URL, c.name, c.labels...); found != (c.want != 0) {
			t.Errorf("MetricOK(%s, %v) found = %v, want %v", c.name, c.labels, found, c.want != 0)
		}
	}
}
