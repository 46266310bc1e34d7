package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/testenv"
)

// The tests of this file start the real provider in-process through run(), each on its
// own database, and talk to it over HTTP.

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

func TestSendReplayMismatchAndLookup(t *testing.T) {
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

		// latency delays each request.
		put(`{"latency": "400ms"}`, http.StatusOK)
		began := time.Now()
		wantStatus(t, "GET with latency", p.must(t, http.MethodGet, "/v1/emails/ambiguous", "", ""), http.StatusOK)
		if took := time.Since(began); took < 400*time.Millisecond {
			t.Fatalf("GET with 400ms latency took %v", took)
		}
	})
}

// smtpServer is a minimal SMTP server standing in for Mailpit: it accepts one message per
// connection and hands over what arrived after DATA.
func smtpServer(t *testing.T) (addr string, messages <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan string, 10)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				fmt.Fprint(conn, "220 test ESMTP\r\n")
				var data strings.Builder
				inData := false
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					switch {
					case inData && line == ".\r\n":
						inData = false
						out <- data.String()
						fmt.Fprint(conn, "250 queued\r\n")
					case inData:
						data.WriteString(line)
					case strings.HasPrefix(line, "DATA"):
						inData = true
						fmt.Fprint(conn, "354 go ahead\r\n")
					case strings.HasPrefix(line, "QUIT"):
						fmt.Fprint(conn, "221 bye\r\n")
						return
					default: // EHLO, MAIL, RCPT
						fmt.Fprint(conn, "250 ok\r\n")
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), out
}

func TestSentEmailsAreRelayedOnceOverSMTP(t *testing.T) {
	t.Parallel()
	t.Run("relays each sent email once", func(t *testing.T) {
		t.Parallel()
		addr, messages := smtpServer(t)
		p := start(t, "SMTP_ADDR", addr)
		body := emailBody("mel@example.com", "Order 42 confirmed")
		wantStatus(t, "send", p.must(t, http.MethodPost, "/v1/emails", "smtp-1", body), http.StatusAccepted)
		wantStatus(t, "replay", p.must(t, http.MethodPost, "/v1/emails", "smtp-1", body), http.StatusAccepted)
		select {
		case m := <-messages:
			if !strings.Contains(m, "To: mel@example.com") || !strings.Contains(m, "Subject: Order 42 confirmed") || !strings.Contains(m, "X-Idempotency-Key: smtp-1") {
				t.Fatalf("relayed message:\n%s", m)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("nothing was relayed")
		}
		select {
		case m := <-messages:
			t.Fatalf("the replay was relayed again:\n%s", m)
		case <-time.After(300 * time.Millisecond):
		}
	})
	t.Run("a relay failure keeps the record", func(t *testing.T) {
		t.Parallel()
		p := start(t, "SMTP_ADDR", testenv.FreeAddr(t)) // nothing listens there
		wantStatus(t, "send", p.must(t, http.MethodPost, "/v1/emails", "smtp-2", emailBody("nell@example.com", "s")), http.StatusAccepted)
		if list := p.list(t, "nell@example.com"); len(list) != 1 || list[0].Deliveries != 1 {
			t.Fatalf("list = %+v, want the email recorded once", list)
		}
		metrics := string(p.must(t, http.MethodGet, "/metrics", "", "").body)
		if !strings.Contains(metrics, "bookstore_emailprovider_smtp_failures_total 1") {
			t.Fatalf("metrics do not count the relay failure:\n%s", grep(metrics, "bookstore_"))
		}
	})
}

func TestHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"DATABASE_URL", "HTTP_ADDR", "EMAILPROVIDER_FAIL_RATE", "EMAILPROVIDER_AMBIGUOUS_RATE", "EMAILPROVIDER_LATENCY", "EMAILPROVIDER_ADMIN", "SMTP_ADDR", ":8084"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--help does not mention %s:\n%s", name, out.String())
		}
	}
}

func grep(text, substr string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
