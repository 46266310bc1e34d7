package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Only a caller with an API key is served, and an Idempotency-Key is its account's own:
// a stranger who sends first under a customer's predictable key sends its own email, in
// its own account, and neither takes the key from bookstore nor shows up in its answers.
func TestAKeyIsItsAccountsOwnAndOnlyCallersWithAnAPIKeyAreServed(t *testing.T) {
	t.Parallel()
	p := start(t)
	const key = "order/018f2b1e-0000-7000-8000-00000000beef/order-confirmed"

	for name, caller := range map[string]provider{
		"no key":        p.as(""),
		"a wrong key":   p.as("not-a-key-the-provider-was-given-0123"),
		"a key's start": p.as(bookstoreKey[:len(bookstoreKey)-1]),
	} {
		for _, r := range []response{
			caller.must(t, http.MethodPost, "/v1/emails", key, emailBody("eve@example.com", "Squatted")),
			caller.must(t, http.MethodGet, "/v1/emails/"+key, "", ""),
			caller.must(t, http.MethodGet, "/v1/emails?to=ada@example.com", "", ""),
			caller.must(t, http.MethodGet, "/admin/faults", "", ""),
		} {
			if r.status != http.StatusUnauthorized || r.header.Get("Content-Type") != "application/problem+json" ||
				!strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s: %d %s %q, want 401 problem+json with WWW-Authenticate: Bearer", name, r.status, r.body, r.header)
			}
		}
	}

	stranger := p.as(strangerKey)
	wantStatus(t, "the stranger sends first", stranger.must(t, http.MethodPost, "/v1/emails", key, emailBody("eve@example.com", "Squatted")), http.StatusAccepted)
	first := p.must(t, http.MethodPost, "/v1/emails", key, emailBody("ada@example.com", "Order confirmed"))
	wantStatus(t, "bookstore sends under the same key", first, http.StatusAccepted)
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("bookstore's send was answered as a replay of the stranger's: %s", first.body)
	}

	for _, c := range []struct {
		caller      provider
		to, subject string
	}{{p, "ada@example.com", "Order confirmed"}, {stranger, "eve@example.com", "Squatted"}} {
		r := c.caller.must(t, http.MethodGet, "/v1/emails/"+key, "", "")
		wantStatus(t, "lookup", r, http.StatusOK)
		var got delivered
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		var shape map[string]any
		_ = json.Unmarshal(r.body, &shape)
		if got.To != c.to || got.Subject != c.subject || shape["content_sha256"] != documentedHash(c.subject, "Thank you for your order.") {
			t.Fatalf("%s looks up %s and finds %s, want its own email to %s with its content hash", c.to, key, r.body, c.to)
		}
	}
	if list := p.list(t, "eve@example.com"); len(list) != 0 {
		t.Fatalf("bookstore lists the stranger's emails: %+v", list)
	}
	if list := stranger.list(t, "ada@example.com"); len(list) != 0 {
		t.Fatalf("the stranger lists bookstore's emails: %+v", list)
	}
}

// A key may do what its scopes say and nothing more: the storefront's read-only key reads
// its account's emails but is refused a send, so it cannot send to a recipient of its
// choosing nor take an order's predictable key before notification does; and a key
// without admin is refused the faults even where EMAILPROVIDER_ADMIN=1 allows them.
func TestAKeyMayDoOnlyWhatItsScopesAllow(t *testing.T) {
	t.Parallel()
	const readerKey = "test-reader-key-0123456789abcdef0123"
	p := start(t, "EMAILPROVIDER_ADMIN", "1",
		"EMAILPROVIDER_API_KEYS", "bookstore:"+bookstoreKey+":send,read,bookstore:"+readerKey+":read")
	reader := p.as(readerKey)
	const key = "order/018f2b1e-0000-7000-8000-00000000cafe/order-cancelled"

	for _, r := range []response{
		reader.must(t, http.MethodPost, "/v1/emails", key, emailBody("eve@example.org", "Squatted")),
		reader.must(t, http.MethodPut, "/admin/faults", "", `{"fail_rate": 1}`),
		p.must(t, http.MethodPut, "/admin/faults", "", `{"fail_rate": 1}`),
	} {
		var problem struct{ Type, Detail string }
		_ = json.Unmarshal(r.body, &problem)
		if r.status != http.StatusForbidden || r.header.Get("Content-Type") != "application/problem+json" ||
			!strings.HasSuffix(problem.Type, "#forbidden") || !strings.Contains(problem.Detail, "scope") {
			t.Fatalf("a key without the route's scope: %d %s, want 403 forbidden naming the scope", r.status, r.body)
		}
	}
	wantStatus(t, "notification sends under the key the reader tried first",
		p.must(t, http.MethodPost, "/v1/emails", key, emailBody("ada@example.com", "Order cancelled")), http.StatusAccepted)
	got := reader.must(t, http.MethodGet, "/v1/emails/"+key, "", "")
	wantStatus(t, "the reader reads the account's email", got, http.StatusOK)
	if !strings.Contains(string(got.body), `"to":"ada@example.com"`) {
		t.Fatalf("the reader finds %s under %s, want notification's email to ada", got.body, key)
	}
	wantStatus(t, "the reader lists", reader.must(t, http.MethodGet, "/v1/emails?to=ada@example.com", "", ""), http.StatusOK)
	wantStatus(t, "the reader reads the faults", reader.must(t, http.MethodGet, "/admin/faults", "", ""), http.StatusOK)
}

// documentedHash is content_sha256 as the API documents it, computed as a caller would:
// the hex SHA-256 of the subject, a line feed and the text.
func documentedHash(subject, text string) string {
	sum := sha256.Sum256([]byte(subject + "\n" + text))
	return hex.EncodeToString(sum[:])
}
