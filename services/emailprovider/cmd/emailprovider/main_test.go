package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/testenv"
)

// The tests of this package start the real provider in-process through run(), each on its
// own database, and talk to it over HTTP. This file holds what they share.

type provider struct {
	base        string
	databaseURL string
}

// start runs the provider through run() on a database of its own until the test ends;
// extra adds name, value pairs to its environment.
func start(t *testing.T, extra ...string) provider {
	t.Helper()
	admin, db := testenv.Database(t, "emailprovider")
	vars := map[string]string{
		"DATABASE_URL":       db,
		"DATABASE_ADMIN_URL": admin,
		"LOG_LEVEL":          "warn",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		vars[extra[i]] = extra[i+1]
	}
	return provider{base: testenv.StartInProcess(t, run, vars), databaseURL: db}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (p provider) do(t *testing.T, client *http.Client, method, path, key, body string) (response, error) {
	t.Helper()
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

func (p provider) must(t *testing.T, method, path, key, body string) response {
	t.Helper()
	r, err := p.do(t, http.DefaultClient, method, path, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func emailBody(to, subject string) string {
	return fmt.Sprintf(`{"to": %q, "subject": %q, "text": "Thank you for your order."}`, to, subject)
}

type delivered struct {
	ID             string    `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
	To             string    `json:"to"`
	Subject        string    `json:"subject"`
	Deliveries     int       `json:"deliveries"`
}

func (p provider) list(t *testing.T, to string) []delivered {
	t.Helper()
	r := p.must(t, http.MethodGet, "/v1/emails?to="+url.QueryEscape(to), "", "")
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var out []delivered
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("list: %v: %s", err, r.body)
	}
	return out
}

func wantStatus(t *testing.T, what string, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
}
