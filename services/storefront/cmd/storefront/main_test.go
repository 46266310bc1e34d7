package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// startAlone runs the storefront in-process with nothing behind it but what env names.
func startAlone(t *testing.T, env map[string]string) string {
	t.Helper()
	return sut.StartInProcess(t, run, env)
}

func TestHelpListsEveryVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"HTTP_ADDR", "ORDERING_URL", "INVENTORY_URL", "NOTIFICATION_URL", "EMAILPROVIDER_URL", "EMAILPROVIDER_API_KEY", "JAEGER_URL", "SOURCE_URL", "STOREFRONT_DEMOS", "STOREFRONT_RELAY_PID", "STOREFRONT_RELAY_PAUSE", "LOG_LEVEL", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--help does not list %s:\n%s", name, out.String())
		}
	}
	for _, name := range []string{"DATABASE_URL", "AMQP_URL", "BOOKSTORE_FAILPOINTS"} {
		if strings.Contains(out.String(), name) {
			t.Errorf("--help lists %s, which the storefront does not read", name)
		}
	}
	if !strings.Contains(out.String(), "127.0.0.1:8080") {
		t.Errorf("HTTP_ADDR's default is not loopback 127.0.0.1:8080:\n%s", out.String())
	}
}

func TestABadDemosValueStopsTheStart(t *testing.T) {
	err := run(context.Background(), nil, func(k string) string {
		return map[string]string{"STOREFRONT_DEMOS": "yes", "HTTP_ADDR": "127.0.0.1:0"}[k]
	}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "STOREFRONT_DEMOS") {
		t.Errorf("run = %v, want an error naming STOREFRONT_DEMOS", err)
	}
}

// The demo actions change the running system: refused unless STOREFRONT_DEMOS=1, and the
// page shows no panel.
func TestDemosAreOffUnlessAskedFor(t *testing.T) {
	base := startAlone(t, map[string]string{"INVENTORY_URL": "http://127.0.0.1:1"})
	req, _ := http.NewRequest(http.MethodPut, base+"/api/demos/faults", strings.NewReader(`{"ambiguous": true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("PUT /api/demos/faults: %d, want 403", resp.StatusCode)
	}
	if page := getPage(t, base+"/"); strings.Contains(page, `id="demos"`) {
		t.Error("the page shows the break-it panel without STOREFRONT_DEMOS=1")
	}
}

// Each rendering of the page carries a new Idempotency-Key in the form: a double click
// sends the same one, a new visit orders anew. A page whose inventory is down says so.
func TestEachPageHasItsOwnIdempotencyKey(t *testing.T) {
	base := startAlone(t, map[string]string{"INVENTORY_URL": "http://127.0.0.1:1"})
	key := regexp.MustCompile(`id="order-key" value="([0-9a-f-]{36})"`)
	first, second := getPage(t, base+"/"), getPage(t, base+"/")
	k1, k2 := key.FindStringSubmatch(first), key.FindStringSubmatch(second)
	if k1 == nil || k2 == nil || k1[1] == k2[1] {
		t.Errorf("keys %v and %v: want one per page, each different", k1, k2)
	}
	if !strings.Contains(first, `id="books-error"`) {
		t.Error("the page does not say that inventory did not answer")
	}
}

func TestJourneyOfABadIDIsA400(t *testing.T) {
	base := startAlone(t, nil)
	resp, err := http.Get(base + "/api/orders/not-a-uuid/journey")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%d %s, want 400 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func getPage(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestABadRelayPIDStopsTheStart(t *testing.T) {
	for _, pid := range []string{"ordering", "-3", "1"} {
		err := run(context.Background(), nil, func(k string) string {
			return map[string]string{"STOREFRONT_DEMOS": "1", "STOREFRONT_RELAY_PID": pid, "HTTP_ADDR": "127.0.0.1:0"}[k]
		}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "STOREFRONT_RELAY_PID") {
			t.Errorf("STOREFRONT_RELAY_PID=%s: run = %v, want an error naming it", pid, err)
		}
	}
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The relay's pause button is there only with demos and an `ordering relay` pid; without
// the pid the panel says why, and the pause is refused. A pid that is not an ordering
// relay (here the test itself) is refused, not stopped.
func TestRelayPauseNeedsDemosAndARelayProcess(t *testing.T) {
	off := startAlone(t, map[string]string{"INVENTORY_URL": "http://127.0.0.1:1", "STOREFRONT_RELAY_PID": strconv.Itoa(os.Getpid())})
	if code, _ := postJSON(t, off+"/api/demos/relay/pause", "{}"); code != http.StatusForbidden {
		t.Errorf("POST /api/demos/relay/pause without demos: %d, want 403", code)
	}

	inside := startAlone(t, map[string]string{"INVENTORY_URL": "http://127.0.0.1:1", "STOREFRONT_DEMOS": "1"})
	page := getPage(t, inside+"/")
	if strings.Contains(page, `id="demo-relay"`) || !strings.Contains(page, "the relay runs inside ordering's API process") {
		t.Error("without STOREFRONT_RELAY_PID the panel shows a pause button or does not say why it has none")
	}
	if code, body := postJSON(t, inside+"/api/demos/relay/pause", "{}"); code != http.StatusForbidden || !strings.Contains(body, "relay-not-apart") {
		t.Errorf("POST /api/demos/relay/pause without a relay pid: %d %s, want 403 relay-not-apart", code, body)
	}

	wrong := startAlone(t, map[string]string{"INVENTORY_URL": "http://127.0.0.1:1", "STOREFRONT_DEMOS": "1",
		"STOREFRONT_RELAY_PID": strconv.Itoa(os.Getpid()), "STOREFRONT_RELAY_PAUSE": "2s"})
	if page := getPage(t, wrong+"/"); !strings.Contains(page, "Pause the relay for 2 s") {
		t.Error("with STOREFRONT_RELAY_PID the panel has no button \"Pause the relay for 2 s\"")
	}
	if code, body := postJSON(t, wrong+"/api/demos/relay/pause", "{}"); code != http.StatusConflict || !strings.Contains(body, "not-the-relay") {
		t.Errorf("POST /api/demos/relay/pause with the test's own pid: %d %s, want 409 not-the-relay", code, body)
	}
	if code, _ := postJSON(t, wrong+"/api/demos/relay/pause", `{"seconds": 60}`); code != http.StatusBadRequest {
		t.Errorf("POST /api/demos/relay/pause with an unknown field: %d, want 400", code)
	}
}

// getWith answers a GET of url: status, headers and body.
func getWith(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// What the storefront answers is the client's to read, and names nothing inside the
// system: a service that failed is named by what failed, not by its internal URL; a pid
// that is not the relay is refused without the command line of the process it is; the
// static files are files, never a directory listing; and every 404 is a problem.
func TestTheStorefrontNamesNoInternalAddressOrProcess(t *testing.T) {
	const inventory = "127.0.0.1:1" // no one answers there
	base := startAlone(t, map[string]string{"INVENTORY_URL": "http://" + inventory, "STOREFRONT_DEMOS": "1",
		"STOREFRONT_RELAY_PID": strconv.Itoa(os.Getpid())})

	code, h, body := getWith(t, base+"/api/books")
	if code != http.StatusServiceUnavailable || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /api/books with inventory down: %d %s, want 503 problem+json", code, h.Get("Content-Type"))
	}
	if strings.Contains(body, inventory) {
		t.Errorf("the 503 names inventory's internal address %s: %s", inventory, body)
	}
	if page := getPage(t, base+"/"); strings.Contains(page, inventory) {
		t.Errorf("the page names inventory's internal address %s", inventory)
	}

	code, body = postJSON(t, base+"/api/demos/relay/pause", "{}")
	exe, _ := os.Executable()
	if code != http.StatusConflict || strings.Contains(body, os.Args[0]) || strings.Contains(body, exe) || strings.Contains(body, "-test.") {
		t.Errorf("POST /api/demos/relay/pause with the test's own pid: %d %s, want 409 naming no process", code, body)
	}

	for _, path := range []string{"/static/", "/static/nothing.css", "/nowhere"} {
		code, h, body := getWith(t, base+path)
		if code != http.StatusNotFound || h.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d %s, want 404 problem+json: %s", path, code, h.Get("Content-Type"), body)
		}
		if strings.Contains(body, "app.js") {
			t.Errorf("GET %s lists the static directory: %s", path, body)
		}
	}
	if code, h, _ := getWith(t, base+"/static/app.js"); code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET /static/app.js: %d %s, want 200 text/javascript", code, h.Get("Content-Type"))
	}
}

// Every answer of the storefront tells the browser to run only the storefront's own
// script files (no inline script, nothing from elsewhere), not to guess a content type,
// and not to show the storefront inside another site's frame, where a click on a hidden
// "Place order" would be the other site's.
func TestThePageAllowsOnlyItsOwnScriptsAndNoFraming(t *testing.T) {
	base := startAlone(t, map[string]string{"INVENTORY_URL": "http://127.0.0.1:1", "STOREFRONT_DEMOS": "1"})
	for _, path := range []string{"/", "/static/app.js", "/api/books", "/nowhere"} {
		_, h, _ := getWith(t, base+path)
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %s", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-") {
			t.Errorf("GET %s: Content-Security-Policy %q allows an unsafe source", path, csp)
		}
		if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", path, got)
		}
		if got := h.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("GET %s: X-Frame-Options %q, want DENY", path, got)
		}
	}
	// The policy holds only if the page needs nothing it forbids: no inline script or
	// style, no handler attribute.
	page := getPage(t, base+"/")
	inline := regexp.MustCompile(`(?i)<script(\s[^>]*)?>\s*[^<\s]|<script>|\son[a-z]+\s*=|<style|\sstyle\s*=|javascript:`)
	if m := inline.FindString(page); m != "" {
		t.Errorf("the page has inline script or style, which its policy forbids: %q", m)
	}
}
