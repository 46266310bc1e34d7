package main

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The provider plays the flaky third party on request: failing, stalling after the send,
// slow. Only an admin may switch it.

func TestFaultsAreInjectedAndSwitchedOnlyByAnAdmin(t *testing.T) {
	t.Parallel()
	t.Run("admin disabled", func(t *testing.T) {
		t.Parallel()
		p := start(t, "EMAILPROVIDER_FAIL_RATE", "1")
		wantStatus(t, "PUT without EMAILPROVIDER_ADMIN", p.must(t, http.MethodPut, "/admin/faults", "", `{"fail_rate": 0}`), http.StatusForbidden)
		got := p.must(t, http.MethodGet, "/admin/faults", "", "")
		if got.status != http.StatusOK || !strings.Contains(string(got.body), `"fail_rate":1`) {
			t.Fatalf("GET /admin/faults = %d %s, want the env's fail_rate 1", got.status, got.body)
		}
		wantStatus(t, "send with fail_rate 1 from the env", p.must(t, http.MethodPost, "/v1/emails", "k", emailBody("x@example.com", "s")), http.StatusServiceUnavailable)
	})
	t.Run("admin enabled", func(t *testing.T) {
		t.Parallel()
		p := start(t, "EMAILPROVIDER_ADMIN", "1")
		put := func(body string, status int) {
			t.Helper()
			wantStatus(t, "PUT /admin/faults "+body, p.must(t, http.MethodPut, "/admin/faults", "", body), status)
		}
		put(`{"fail_rate": 2}`, http.StatusUnprocessableEntity)
		put(`{"fail_rate": 0, "ambiguous_rate": 0, "latency": "soon"}`, http.StatusBadRequest)

		// fail_rate: 503 and nothing sent.
		put(`{"fail_rate": 1, "ambiguous_rate": 0, "latency": "0s"}`, http.StatusOK)
		wantStatus(t, "send with fail_rate 1", p.must(t, http.MethodPost, "/v1/emails", "failed", emailBody("lin@example.com", "s")), http.StatusServiceUnavailable)
		wantStatus(t, "GET after a failed send", p.must(t, http.MethodGet, "/v1/emails/failed", "", ""), http.StatusNotFound)

		// ambiguous_rate: sent, but the caller times out and cannot know.
		put(`{"fail_rate": 0, "ambiguous_rate": 1, "latency": "0s"}`, http.StatusOK)
		impatient := &http.Client{Timeout: 300 * time.Millisecond}
		_, err := p.do(t, impatient, http.MethodPost, "/v1/emails", "ambiguous", emailBody("lin@example.com", "s"))
		var netErr net.Error
		if !errors.As(err, &netErr) || !netErr.Timeout() {
			t.Fatalf("ambiguous send: err %v, want a client timeout", err)
		}
		got := p.must(t, http.MethodGet, "/v1/emails/ambiguous", "", "")
		wantStatus(t, "reconciliation query after an ambiguous send", got, http.StatusOK)
		put(`{"fail_rate": 0, "ambiguous_rate": 0, "latency": "0s"}`, http.StatusOK)
		replay := p.must(t, http.MethodPost, "/v1/emails", "ambiguous", emailBody("lin@example.com", "s"))
		if replay.status != http.StatusAccepted || replay.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after an ambiguous send: %d replayed=%q", replay.status, replay.header.Get("Idempotent-Replayed"))
		}
		if list := p.list(t, "lin@example.com"); len(list) != 1 || list[0].Deliveries != 1 {
			t.Fatalf("list = %+v, want only the ambiguous email, delivered once", list)
		}

		// refuse_to: 422 for that recipient alone, nothing sent; everyone else is served.
		put(`{"refuse_to": [""]}`, http.StatusUnprocessableEntity)
		put(`{"refuse_to": ["gone@example.com"]}`, http.StatusOK)
		wantStatus(t, "send to a refused recipient", p.must(t, http.MethodPost, "/v1/emails", "refused", emailBody("gone@example.com", "s")), http.StatusUnprocessableEntity)
		wantStatus(t, "GET after a refused send", p.must(t, http.MethodGet, "/v1/emails/refused", "", ""), http.StatusNotFound)
		wantStatus(t, "send to another recipient meanwhile", p.must(t, http.MethodPost, "/v1/emails", "served", emailBody("lin@example.com", "s")), http.StatusAccepted)

		// latency delays each request.
		put(`{"latency": "400ms"}`, http.StatusOK)
		began := time.Now()
		wantStatus(t, "GET with latency", p.must(t, http.MethodGet, "/v1/emails/ambiguous", "", ""), http.StatusOK)
		if took := time.Since(began); took < 400*time.Millisecond {
			t.Fatalf("GET with 400ms latency took %v", took)
		}
	})
}
