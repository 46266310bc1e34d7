package apitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	apidocs "github.com/bookstore-go/bookstore/api"
)

// RestOfPath is the extension that marks a path parameter as taking the rest of the
// path, slashes included (the email provider's idempotency keys: order/<id>/<kind>).
// OpenAPI has no such parameter; the document says so in the parameter's description.
const RestOfPath = "x-rest-of-path"

// FindRoute finds the operation of a request in the documents: the service's document
// when service is not empty, otherwise whichever document has the path (the probe paths
// are the same in all four). ok is false when no document has the path and method.
func (c *Contracts) FindRoute(service string, req *http.Request) (route *routers.Route, params map[string]string, ok bool) {
	names := make([]string, 0, len(c.Docs))
	for name := range c.Docs {
		if service == "" || name == service {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	segs := strings.Split(strings.TrimPrefix(req.URL.EscapedPath(), "/"), "/")
	for _, name := range names {
		doc := c.Docs[name]
		for _, tmpl := range doc.Paths.InMatchingOrder() {
			item := doc.Paths.Value(tmpl)
			op := item.GetOperation(req.Method)
			if op == nil {
				continue
			}
			if params, ok := matchPath(tmpl, segs, item, op); ok {
				return &routers.Route{Spec: doc, Path: tmpl, PathItem: item, Method: req.Method, Operation: op}, params, true
			}
		}
	}
	return nil, nil, false
}

func matchPath(tmpl string, segs []string, item *openapi3.PathItem, op *openapi3.Operation) (map[string]string, bool) {
	parts := strings.Split(strings.TrimPrefix(tmpl, "/"), "/")
	params := map[string]string{}
	for i, p := range parts {
		if i >= len(segs) {
			return nil, false
		}
		if !strings.HasPrefix(p, "{") || !strings.HasSuffix(p, "}") {
			if p != segs[i] {
				return nil, false
			}
			continue
		}
		name := p[1 : len(p)-1]
		raw := segs[i]
		if i == len(parts)-1 && restOfPath(name, item, op) {
			raw = strings.Join(segs[i:], "/")
		}
		v, err := url.PathUnescape(raw)
		if err != nil || v == "" {
			return nil, false
		}
		params[name] = v
		if raw != segs[i] {
			return params, true
		}
	}
	return params, len(parts) == len(segs)
}

func restOfPath(name string, item *openapi3.PathItem, op *openapi3.Operation) bool {
	for _, ps := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, p := range ps {
			if p.Value != nil && p.Value.Name == name && p.Value.In == openapi3.ParameterInPath && p.Value.Extensions[RestOfPath] == true {
				return true
			}
		}
	}
	return false
}

func options() *openapi3filter.Options {
	return &openapi3filter.Options{
		IncludeResponseStatus: true,
		MultiError:            true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
}

// Check validates one exchange against the documents: the response always (its status
// must be documented for the operation, and its headers and body must match), the request
// only when the response is a success, since tests send malformed requests on purpose
// and a 4xx problem for them is what the response check covers. A request whose path and
// method no document has must be answered 404 or 405 (a deliberate request to a path the
// service does not have; ok false) when service names the document, or 421, checked
// against the document's Misdirected response (the Host check answers before any route):
// any other answer means the service has a route its document lacks. HEAD and OPTIONS
// are not checked.
func (c *Contracts) Check(service string, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) (ok bool, err error) {
	if req.Method == http.MethodHead || req.Method == http.MethodOptions {
		return false, nil
	}
	route, params, found := c.FindRoute(service, req)
	if !found && service != "" && resp.StatusCode == http.StatusMisdirectedRequest {
		// The Host check answers before any route, so on a path no operation has too:
		// that answer is checked against the document's own.
		route, params, found = c.misdirected(service, req)
	}
	if !found {
		// Which service answered is known only by name: by path, a route no document
		// has could be any process's.
		if service == "" || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return false, nil
		}
		return true, fmt.Errorf("%s %s was answered %d, but no operation of api/openapi/%s.yaml has that path and method: document the route",
			req.Method, req.URL.RequestURI(), resp.StatusCode, service)
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: options()}
	var errs []error
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			errs = append(errs, fmt.Errorf("request: %w", err))
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                options(),
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		errs = append(errs, fmt.Errorf("response %d: %w", resp.StatusCode, err))
	}
	if err := errors.Join(errs...); err != nil {
		return true, fmt.Errorf("%s %s (operation %s, openapi/%s): %w", req.Method, req.URL.RequestURI(), route.Operation.OperationID, docName(c, route.Spec), err)
	}
	return true, nil
}

// misdirected is the route of a request to a path no operation of service's document
// has: an operation whose one answer is the document's Misdirected response (421), which
// the Host check gives before any route is looked at. ok is false when the document has
// no such response.
func (c *Contracts) misdirected(service string, req *http.Request) (route *routers.Route, params map[string]string, ok bool) {
	doc := c.Docs[service]
	if doc == nil || doc.Components == nil || doc.Components.Responses["Misdirected"] == nil {
		return nil, nil, false
	}
	op := openapi3.NewOperation()
	op.OperationID = "(any path: the Host check)"
	op.Responses = openapi3.NewResponses(openapi3.WithStatus(http.StatusMisdirectedRequest, doc.Components.Responses["Misdirected"]))
	return &routers.Route{Spec: doc, Path: req.URL.Path, Method: req.Method, Operation: op}, map[string]string{}, true
}

func docName(c *Contracts, doc *openapi3.T) string {
	for name, d := range c.Docs {
		if d == doc {
			return name + ".yaml"
		}
	}
	return "?"
}

// Transport validates every exchange with a watched host (Watch) against the documents,
// then hands the response on unchanged. Other hosts pass through unchecked.
type Transport struct {
	Base http.RoundTripper
}

var (
	mu         sync.Mutex
	watched    = map[string]*watch{} // host:port -> its watch
	installOne sync.Once
)

type watch struct {
	service    string // "" when the service is known only by its paths
	refs       int
	violations []string
	checked    int
}

// Install makes http.DefaultTransport validate the traffic of watched hosts, so that
// http.Get, http.DefaultClient and every client without a transport of its own is
// checked. It is idempotent. Importing the package installs it, before any test runs:
// replacing the variable while another test's goroutine reads it would be a data race.
func init() { Install() }

// Install is what importing the package does; see init.
func Install() {
	installOne.Do(func() {
		http.DefaultTransport = &Transport{Base: http.DefaultTransport}
	})
}

// Watch validates, until the test ends, every exchange with base (a service's base URL,
// http://host:port) that goes through http.DefaultTransport, and fails t at its end with
// each exchange that does not match the service's OpenAPI document. service names the
// document, or is "" to find it by path.
func Watch(t testing.TB, base, service string) {
	t.Helper()
	if _, err := Load(); err != nil {
		t.Fatalf("apitest: %v", err)
	}
	Install()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("apitest: base URL %q: %v", base, err)
	}
	host := u.Host
	mu.Lock()
	w := watched[host]
	if w == nil {
		w = &watch{service: service}
		watched[host] = w
	}
	w.refs++
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		v := w.violations
		w.violations = nil
		w.refs--
		if w.refs == 0 {
			delete(watched, host)
		}
		mu.Unlock()
		for _, s := range v {
			t.Errorf("OpenAPI contract (api/openapi): %s", s)
		}
	})
}

// RoundTrip implements http.RoundTripper.
func (tr *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	mu.Lock()
	w := watched[req.URL.Host]
	mu.Unlock()
	if w == nil {
		return tr.Base.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := tr.Base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	respBody, readErr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = &replay{r: bytes.NewReader(respBody), err: readErr}
	if readErr != nil {
		return resp, nil // a cut response: the client sees the cut, there is nothing to check
	}
	checked, err := MustLoad().Check(w.service, req, reqBody, resp, respBody)
	mu.Lock()
	if checked {
		w.checked++
	}
	if err != nil {
		w.violations = append(w.violations, err.Error())
	}
	mu.Unlock()
	return resp, nil
}

// replay gives a response body back as it was read, then the error that ended the read.
type replay struct {
	r   *bytes.Reader
	err error
}

func (b *replay) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && b.err != nil {
		return n, b.err
	}
	return n, err
}

func (b *replay) Close() error { return nil }

// Checker is Bookstore's contracts for a testenv.System: each test package gives it to
// its System, beside the topology.
type Checker struct{}

// Watch implements testenv.ContractChecker: name selects the service's document when it
// is one of apidocs.Services; "" finds the document by path. A process of another name has
// no document (a tool, a web front end) and is not watched.
func (Checker) Watch(t testing.TB, base, name string) {
	t.Helper()
	if name != "" && !slices.Contains(apidocs.Services, name) {
		return
	}
	Watch(t, base, name)
}

// IsEvent implements testenv.ContractChecker.
func (Checker) IsEvent(typ string) bool { return HasSchema(typ) }

// CheckMessage implements testenv.ContractChecker.
func (Checker) CheckMessage(contentType, messageID, typ string, body []byte) error {
	return ValidateMessage(contentType, messageID, typ, body)
}
