package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthcheckPassesOnlyOn200(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"rabbitmq":"broker dial: connection refused"}`))
		}
	}))
	defer srv.Close()

	if err := check([]string{srv.URL + "/readyz"}); err != nil {
		t.Errorf("200: %v, want healthy", err)
	}
	err := check([]string{srv.URL + "/down"})
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "rabbitmq") {
		t.Errorf("503: %v, want an error naming the status and the failed dependency", err)
	}
	srv.Close()
	if err := check([]string{srv.URL + "/readyz"}); err == nil {
		t.Error("server gone: healthy, want an error")
	}
	if err := check(nil); err == nil {
		t.Error("no URL: healthy, want a usage error")
	}
}
