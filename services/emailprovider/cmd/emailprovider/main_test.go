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

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv"
)

// sut is the system under test, as testenv's helpers see it.
// Every request the tests send the provider, and every response, is checked against
// api/openapi/emailprovider.yaml.
var sut = testenv.System{Contracts: apitest.Checker{}}

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// The tests of this package start the real provider in-process through run(), each on its
// own database, and talk to it over HTTP. This file holds what they share.

type provider struct {
	base        string
	databaseURL string
	apiKey      string // sent as Authorization: Bearer; "" sends none
}

// The API keys of the tests' two accounts: bookstore's, which the tests send as unless
// they say otherwise and which holds every scope, and a stranger's, with the default
// scopes (send, read).
const (
	bookstoreKey = "test-bookstore-key-0123456789abcdef"
	strangerKey  = "test-stranger-key-0123456789abcdef0"
)

// as returns the provider as the caller holding apiKey sees it.
func (p provider) as(apiKey string) provider {
	p.apiKey = apiKey
	return p
}

// start runs the provider through run() on a database of its own until the test ends;
// extra adds name, value pairs to its environment.
func start(t *testing.T, extra ...string) provider {
	t.Helper()
	admin, db := testenv.Database(t, "emailprovider")
	vars := map[string]string{
		"DATABASE_URL":           db,
		"DATABASE_ADMIN_URL":     admin,
		"LOG_LEVEL":              "warn",
		"EMAILPROVIDER_API_KEYS": "bookstore:" + bookstoreKey + ":send,read,admin,stranger:" + strangerKey,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		vars[extra[i]] = extra[i+1]
	}
	return provider{base: sut.StartInProcess(t, run, vars), databaseURL: db, apiKey: bookstoreKey}
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
	if p.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.apiKey)
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

// list reads every email sent to the address, following the next links page by page.
func (p provider) list(t *testing.T, to string) []delivered {
	t.Helper()
	out, _ := p.listPages(t, "/v1/emails?to="+url.QueryEscape(to))
	return out
}

// listPages reads the list at path and every page after it, and returns the emails and
// the size of each page.
func (p provider) listPages(t *testing.T, path string) (all []delivered, sizes []int) {
	t.Helper()
	for path != "" {
		r := p.must(t, http.MethodGet, path, "", "")
		if r.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", path, r.status, r.body)
		}
		var page []delivered
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatalf("list %s: %v: %s", path, err, r.body)
		}
		all, sizes = append(all, page...), append(sizes, len(page))
		path = httpapi.NextLink(r.header)
		if len(sizes) > 1000 {
			t.Fatalf("list: more than 1000 pages")
		}
	}
	return all, sizes
}

func wantStatus(t *testing.T, what string, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
}
