package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/testenv"
)

// The API of the contracts: a send, its replay and the key's lookup; what the provider
// refuses; one key sent at once from many requests. Also --help.

func TestAKeySendsOnceReplaysTheSameRequestRefusesAnotherAndFindsTheEmail(t *testing.T) {
	t.Parallel()
	p := start(t)
	const key = "order/018f2b1e-0000-7000-8000-00000000abcd/order-confirmed"

	first := p.must(t, http.MethodPost, "/v1/emails", key, emailBody("ada@example.com", "Order confirmed"))
	wantStatus(t, "first send", first, http.StatusAccepted)
	var sent struct {
		ID, IdempotencyKey, Status string
		CreatedAt                  time.Time `json:"created_at"`
	}
	if err := json.Unmarshal(first.body, &sent); err != nil {
		t.Fatal(err)
	}
	var shape map[string]any
	_ = json.Unmarshal(first.body, &shape)
	if len(shape) != 4 || shape["idempotency_key"] != key || shape["status"] != "sent" || shape["id"] == "" || shape["created_at"] == nil {
		t.Fatalf("response %s, want exactly id, idempotency_key, status=sent, created_at", first.body)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first send marked as a replay")
	}

	// The same body with other whitespace and field order is the same request.
	replay := p.must(t, http.MethodPost, "/v1/emails", key, `{"subject":"Order confirmed","text":"Thank you for your order.","to":"ada@example.com"}`)
	wantStatus(t, "replay", replay, http.StatusAccepted)
	if string(replay.body) != string(first.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay answered %s (replayed=%q), want the first body %s", replay.body, replay.header.Get("Idempotent-Replayed"), first.body)
	}

	mismatch := p.must(t, http.MethodPost, "/v1/emails", key, emailBody("ada@example.com", "Another subject"))
	wantStatus(t, "same key, other body", mismatch, http.StatusUnprocessableEntity)
	if !strings.Contains(string(mismatch.body), "Idempotency-Key") {
		t.Fatalf("422 does not name the key: %s", mismatch.body)
	}

	missing := p.must(t, http.MethodPost, "/v1/emails", "", emailBody("ada@example.com", "Order confirmed"))
	wantStatus(t, "no key", missing, http.StatusBadRequest)
	if !strings.Contains(string(missing.body), "Idempotency-Key") || missing.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("400 does not name the missing header as a problem: %s", missing.body)
	}
	invalid := p.must(t, http.MethodPost, "/v1/emails", "other-key", `{"to": "not an address", "subject": "x", "text": "y"}`)
	wantStatus(t, "invalid to", invalid, http.StatusUnprocessableEntity)
	unknown := p.must(t, http.MethodPost, "/v1/emails", "other-key", `{"to": "ada@example.com", "subject": "x", "text": "y", "cc": "z"}`)
	wantStatus(t, "unknown field", unknown, http.StatusBadRequest)

	// The reconciliation query, with the key's slashes escaped and not.
	for _, path := range []string{"/v1/emails/" + url.PathEscape(key), "/v1/emails/" + key} {
		got := p.must(t, http.MethodGet, path, "", "")
		wantStatus(t, "GET "+path, got, http.StatusOK)
		var d delivered
		if err := json.Unmarshal(got.body, &d); err != nil {
			t.Fatal(err)
		}
		if d.ID != sent.ID || d.IdempotencyKey != key || d.Deliveries != 1 || d.To != "ada@example.com" || d.Subject != "Order confirmed" || d.Status != "sent" {
			t.Fatalf("GET %s = %+v", path, d)
		}
	}
	wantStatus(t, "GET unknown key", p.must(t, http.MethodGet, "/v1/emails/"+url.PathEscape("order/none/order-confirmed"), "", ""), http.StatusNotFound)

	list := p.list(t, "ada@example.com")
	if len(list) != 1 || list[0].Deliveries != 1 || list[0].IdempotencyKey != key {
		t.Fatalf("list = %+v, want the one email with deliveries 1", list)
	}
	if got := p.list(t, "bob@example.com"); len(got) != 0 {
		t.Fatalf("list for another address = %+v", got)
	}
	wantStatus(t, "list without to", p.must(t, http.MethodGet, "/v1/emails", "", ""), http.StatusBadRequest)
}

// Bytes Postgres cannot store, a NUL or invalid UTF-8, in a body, a path or a query: each
// is the client's mistake, a 400 naming where it is, never a 500.
func TestTextPostgresCannotStoreIsRefusedAs400(t *testing.T) {
	t.Parallel()
	p := start(t)
	for _, c := range []struct {
		what, method, path, body, field string
	}{
		{"a NUL in the subject", http.MethodPost, "/v1/emails", `{"to": "ada@example.com", "subject": "a\u0000b", "text": "y"}`, "subject"},
		{"invalid UTF-8 in the text", http.MethodPost, "/v1/emails", "{\"to\": \"ada@example.com\", \"subject\": \"x\", \"text\": \"\xff\"}", ""},
		{"a NUL in the key of a lookup", http.MethodGet, "/v1/emails/abc%00def", "", "idempotency_key"},
		{"invalid UTF-8 in to", http.MethodGet, "/v1/emails?to=%ff", "", "to"},
		{"a NUL in to", http.MethodGet, "/v1/emails?to=a%00b", "", "to"},
	} {
		key := ""
		if c.method == http.MethodPost {
			key = "nul-" + c.field
		}
		r := p.must(t, c.method, c.path, key, c.body)
		wantStatus(t, c.what, r, http.StatusBadRequest)
		if r.header.Get("Content-Type") != "application/problem+json" || (c.field != "" && !strings.Contains(string(r.body), `"field":"`+c.field+`"`)) {
			t.Errorf("%s: %s, want a problem naming %q", c.what, r.body, c.field)
		}
	}
}

// A second request for a key whose first request is still being sent gets 409: it must
// neither send again nor be told "not sent". The first request is held in flight by the
// latency fault, which a send spends holding its key; the test waits until Postgres shows
// the key's advisory lock held before it sends the second request.
func TestConcurrentRequestWithKeyInFlightIs409(t *testing.T) {
	t.Parallel()
	p := start(t, "EMAILPROVIDER_LATENCY", "1500ms")
	const key = "in-flight"
	body := emailBody("grace@example.com", "Order confirmed")

	firstDone := make(chan response, 1)
	go func() {
		r, err := p.do(t, http.DefaultClient, http.MethodPost, "/v1/emails", key, body)
		if err != nil {
			t.Errorf("first send: %v", err)
		}
		firstDone <- r
	}()
	conn, err := pgx.Connect(context.Background(), p.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testenv.Eventually(t, 10*time.Second, "the first request to hold the key's lock", func() bool {
		var n int
		err := conn.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
		return err == nil && n == 1
	})

	second := p.must(t, http.MethodPost, "/v1/emails", key, body)
	wantStatus(t, "second request while the first is in flight", second, http.StatusConflict)

	first := <-firstDone
	wantStatus(t, "first send", first, http.StatusAccepted)
	again := p.must(t, http.MethodPost, "/v1/emails", key, body)
	wantStatus(t, "retry after the first completed", again, http.StatusAccepted)
	if string(again.body) != string(first.body) {
		t.Fatalf("retry answered %s, want %s", again.body, first.body)
	}
	if list := p.list(t, "grace@example.com"); len(list) != 1 || list[0].Deliveries != 1 {
		t.Fatalf("list = %+v, want one email delivered once", list)
	}
}

// Many requests with one key at the same moment: one sends, every other is a replay or a
// 409, and the provider delivered once.
func TestStormOfOneKeySendsOnce(t *testing.T) {
	t.Parallel()
	p := start(t)
	const n = 24
	body := emailBody("storm@example.com", "Order confirmed")
	var wg sync.WaitGroup
	results := make(chan response, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.do(t, http.DefaultClient, http.MethodPost, "/v1/emails", "storm", body)
			if err != nil {
				t.Errorf("send: %v", err)
				return
			}
			results <- r
		}()
	}
	wg.Wait()
	close(results)
	originals := 0
	for r := range results {
		switch {
		case r.status == http.StatusAccepted && r.header.Get("Idempotent-Replayed") == "":
			originals++
		case r.status == http.StatusAccepted, r.status == http.StatusConflict:
		default:
			t.Errorf("unexpected answer %d: %s", r.status, r.body)
		}
	}
	if originals != 1 {
		t.Fatalf("%d requests sent the email, want exactly 1", originals)
	}
	if list := p.list(t, "storm@example.com"); len(list) != 1 || list[0].Deliveries != 1 {
		t.Fatalf("list = %+v, want one email delivered once", list)
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"DATABASE_URL", "HTTP_ADDR", "EMAILPROVIDER_FAIL_RATE", "EMAILPROVIDER_AMBIGUOUS_RATE", "EMAILPROVIDER_LATENCY", "EMAILPROVIDER_ADMIN", "EMAILPROVIDER_GROUP_COMMIT", "SMTP_ADDR", ":8084"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--help does not mention %s:\n%s", name, out.String())
		}
	}
}
