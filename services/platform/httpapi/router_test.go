package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// exampleAPI is a router with one resource of each kind: a collection that takes POST,
// a member that takes GET and PUT.
func exampleAPI() http.Handler {
	r := httpapi.NewRouter()
	echo := func(route string) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			w.Header().Set("X-Route", route)
			httpapi.WriteJSON(w, http.StatusOK, map[string]string{"method": req.Method, "body": string(body)})
		}
	}
	r.Post("/orders", echo("POST /orders"))
	r.Get("/orders/{id}", echo("GET /orders/{id}"))
	r.Put("/orders/{id}", echo("PUT /orders/{id}"))
	return r
}

type answer struct {
	status  int
	header  http.Header
	body    []byte
	problem httpapi.Problem
}

func call(t *testing.T, h http.Handler, method, path, contentType, body string) answer {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	a := answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if rec.Header().Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(a.body, &a.problem); err != nil {
			t.Fatalf("%s %s: problem body %q: %v", method, path, a.body, err)
		}
	}
	return a
}

func TestEveryRoutingErrorIsAProblem(t *testing.T) {
	t.Parallel()
	api := exampleAPI()
	for _, c := range []struct {
		name, method, path, contentType string
		status                          int
		slug, allow                     string
	}{
		{"an unknown path", http.MethodGet, "/nowhere", "", http.StatusNotFound, "not-found", ""},
		{"an unknown path with a body of any type", http.MethodPost, "/nowhere", "text/plain", http.StatusNotFound, "not-found", ""},
		{"DELETE on a member", http.MethodDelete, "/orders/1", "", http.StatusMethodNotAllowed, "method-not-allowed", "GET, HEAD, PUT"},
		{"GET on the collection", http.MethodGet, "/orders", "", http.StatusMethodNotAllowed, "method-not-allowed", "POST"},
		{"HEAD on the collection, which has no GET", http.MethodHead, "/orders", "", http.StatusMethodNotAllowed, "", "POST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := call(t, api, c.method, c.path, c.contentType, "")
			if a.status != c.status {
				t.Fatalf("status %d, want %d (%s)", a.status, c.status, a.body)
			}
			if got := a.header.Get("Content-Type"); got != "application/problem+json" {
				t.Errorf("Content-Type %q, want application/problem+json", got)
			}
			if c.slug != "" && (a.problem.Type != httpapi.ProblemType+c.slug || a.problem.Status != c.status || a.problem.Detail == "") {
				t.Errorf("problem %+v, want type …#%s, status %d and a detail", a.problem, c.slug, c.status)
			}
			if got := a.header.Get("Allow"); got != c.allow {
				t.Errorf("Allow %q, want %q", got, c.allow)
			}
		})
	}
}

func TestHeadIsServedWhereverGetIs(t *testing.T) {
	t.Parallel()
	get := call(t, exampleAPI(), http.MethodGet, "/orders/1", "", "")
	head := call(t, exampleAPI(), http.MethodHead, "/orders/1", "", "")
	if head.status != http.StatusOK || head.header.Get("X-Route") != "GET /orders/{id}" {
		t.Fatalf("HEAD: %d handled by %q, want 200 from the GET handler", head.status, head.header.Get("X-Route"))
	}
	if get.header.Get("Content-Type") != head.header.Get("Content-Type") {
		t.Errorf("HEAD Content-Type %q, GET's %q", head.header.Get("Content-Type"), get.header.Get("Content-Type"))
	}
}

// A browser posts text/plain, a form or multipart cross-site without a CORS preflight;
// only application/json makes it ask first. So only that is taken.
func TestABodyIsTakenOnlyWhenDeclaredJSON(t *testing.T) {
	t.Parallel()
	api := exampleAPI()
	const body = `{"customer_email":"a@b.c"}`
	for _, c := range []struct {
		contentType string
		taken       bool
	}{
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"Application/JSON; charset=UTF-8", true},
		{"application/merge-patch+json", true},
		{"", false},
		{"text/plain", false},
		{"text/plain; charset=utf-8", false},
		{"application/x-www-form-urlencoded", false},
		{"multipart/form-data; boundary=x", false},
		{"application/json; charset=latin1", false},
		{"application/json; boundary=x", false},
		{"application/json;;", false},
		{"text/json+html", false},
	} {
		for _, target := range []struct{ method, path string }{{http.MethodPost, "/orders"}, {http.MethodPut, "/orders/1"}} {
			a := call(t, api, target.method, target.path, c.contentType, body)
			switch {
			case c.taken && (a.status != http.StatusOK || !bytes.Contains(a.body, []byte("customer_email"))):
				t.Errorf("%s %s as %q: %d %s, want the handler to read the body", target.method, target.path, c.contentType, a.status, a.body)
			case !c.taken && (a.status != http.StatusUnsupportedMediaType || a.problem.Type != httpapi.ProblemType+"unsupported-media-type" ||
				len(a.problem.Errors) != 1 || a.problem.Errors[0].Field != "Content-Type"):
				t.Errorf("%s %s as %q: %d %s, want a 415 problem naming Content-Type", target.method, target.path, c.contentType, a.status, a.body)
			}
		}
	}
}

func TestTwoContentTypesAreRefused(t *testing.T) {
	t.Parallel()
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
	req.Header.Add("Content-Type", "application/json")
	req.Header.Add("Content-Type", "text/plain")
	rec := httptest.NewRecorder()
	exampleAPI().ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Errorf("status %d, want 415", rec.Code)
	}
}

func TestReadyzNamesTheFailedCheckButKeepsWhyInTheLog(t *testing.T) {
	t.Parallel()
	secret := errors.New(`failed to connect to user=inventory database=inventory: dial tcp 10.1.2.3:5432`)
	var log bytes.Buffer
	h := httpapi.Readyz(slog.New(slog.NewTextHandler(&log, nil)),
		httpapi.Check{Name: "postgres", Ping: func(context.Context) error { return secret }},
		httpapi.Check{Name: "rabbitmq", Ping: func(context.Context) error { return nil }})
	a := call(t, h, http.MethodGet, "/readyz", "", "")
	var got map[string]string
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	if a.status != http.StatusServiceUnavailable || got["postgres"] != "unavailable" || got["rabbitmq"] != "ok" {
		t.Errorf("%d %v, want 503 with postgres unavailable and rabbitmq ok", a.status, got)
	}
	if bytes.Contains(a.body, []byte("10.1.2.3")) || bytes.Contains(a.body, []byte("user=")) {
		t.Errorf("the response tells the client %s", a.body)
	}
	if !strings.Contains(log.String(), "10.1.2.3") || !strings.Contains(log.String(), "check=postgres") {
		t.Errorf("the log does not say why postgres failed: %s", log.String())
	}
}

func TestServerRefusesHeadersBeyond64KiB(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- httpapi.Serve(ctx, "127.0.0.1:0", httpapi.Hosts{}, exampleAPI(), slog.New(slog.DiscardHandler), func(a net.Addr) { addr <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + (<-addr).String()
	get := func(headerBytes int) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/orders/1", nil)
		req.Header.Set("X-Padding", strings.Repeat("p", headerBytes))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(httpapi.MaxHeaderBytes - 1024); got != http.StatusOK {
		t.Errorf("a header just under %d bytes: %d, want 200", httpapi.MaxHeaderBytes, got)
	}
	// Go's server allows 4 KiB of slack over MaxHeaderBytes; 128 KiB is well past both
	// and still far below Go's 1 MiB default, which would take it.
	if got := get(2 * httpapi.MaxHeaderBytes); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a %d-byte header: %d, want 431", 2*httpapi.MaxHeaderBytes, got)
	}
}

// A body in a content coding other than identity is refused with a 415 naming
// Content-Encoding, before the handler reads it: a handler would read gzip as the JSON it
// is declared to be, or plain JSON labelled gzip as what it says, and either way act on
// a body other than the one sent. identity, the absence of a coding, passes.
func TestABodyInAContentCodingIsRefused(t *testing.T) {
	t.Parallel()
	api := exampleAPI()
	for _, coding := range []string{"gzip", "deflate", "br", "GZIP", "identity, gzip", "x-unknown"} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"name":"a"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", coding)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		var p httpapi.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusUnsupportedMediaType || len(p.Errors) != 1 || p.Errors[0].Field != "Content-Encoding" {
			t.Errorf("Content-Encoding %q: %d %s, want 415 naming Content-Encoding", coding, rec.Code, rec.Body)
		}
	}
	for _, coding := range []string{"identity", "Identity"} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"name":"a"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", coding)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code == http.StatusUnsupportedMediaType {
			t.Errorf("Content-Encoding %q: %d %s, want it taken as no coding", coding, rec.Code, rec.Body)
		}
	}
}
