package apitest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func exchange(method, target, reqBody string, status int, header map[string]string, respBody string) (*http.Request, []byte, *http.Response, []byte) {
	req, _ := http.NewRequest(method, "http://127.0.0.1:1"+target, strings.NewReader(reqBody))
	if reqBody != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp := &http.Response{StatusCode: status, Header: http.Header{}}
	for k, v := range header {
		resp.Header.Set(k, v)
	}
	return req, []byte(reqBody), resp, []byte(respBody)
}

const (
	order   = `{"id":"018f2b1e-0000-7000-8000-000000000001","customer_email":"ada@example.com","status":"pending","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000002","quantity":2}],"created_at":"2026-11-29T21:00:00Z","updated_at":"2026-11-29T21:00:00Z","history":[{"event":"placed","at":"2026-11-29T21:00:00Z"}]}`
	placeIt = `{"customer_email":"ada@example.com","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000002","quantity":2}]}`
	problem = `{"type":"https://github.com/bookstore-go/bookstore/blob/main/docs/problems.md#%s","title":"t","status":%d,"detail":"d"%s}`
)

func prob(slug string, status int, errs string) string {
	return strings.NewReplacer("%s", slug).Replace(strings.Replace(strings.Replace(problem, "%d", itoa(status), 1), `"d"%s`, `"d"`+errs, 1))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestCheckCatchesDrift: the check passes what the documents say and fails each kind of
// drift a handler could make.
func TestCheckCatchesDrift(t *testing.T) {
	c := MustLoad()
	json201 := map[string]string{"Content-Type": "application/json", "Location": "/orders/018f2b1e-0000-7000-8000-000000000001"}
	problemJSON := map[string]string{"Content-Type": "application/problem+json"}
	for _, tc := range []struct {
		name    string
		method  string
		target  string
		reqBody string
		status  int
		header  map[string]string
		body    string
		wantErr string // "" for no error
	}{
		{"a placed order", "POST", "/orders", placeIt, 201, json201, order, ""},
		{"a renamed field", "POST", "/orders", placeIt, 201, json201, strings.Replace(order, "customer_email", "email", 1), `"email"`},
		{"an undocumented status", "POST", "/orders", placeIt, 202, json201, order, "status is not supported"},
		{"no Location", "POST", "/orders", placeIt, 201, map[string]string{"Content-Type": "application/json"}, order, "Location"},
		{"a replay without its header", "POST", "/orders", placeIt, 200, json201, order, "Idempotent-Replayed"},
		{"an accepted request the document refuses", "POST", "/orders", `{"customer_email":"ada@example.com","lines":[]}`, 201, json201, order, "request"},
		{"a refused malformed request", "POST", "/orders", `{"nope":1}`, 400, problemJSON, prob("malformed", 400, ""), ""},
		{"the wrong problem type", "POST", "/orders", `{}`, 422, problemJSON, prob("malformed", 422, `,"errors":[{"field":"x","detail":"y"}]`), "response"},
		{"a validation problem without errors", "POST", "/orders", `{}`, 422, problemJSON, prob("validation", 422, ""), "errors"},
		{"a problem as JSON", "GET", "/orders/x", "", 400, map[string]string{"Content-Type": "application/json"}, prob("malformed", 400, ""), "Content-Type"},
		{"a key with slashes", "GET", "/v1/emails/order/018f2b1e-0000-7000-8000-000000000001/order-confirmed", "", 404, problemJSON, prob("not-found", 404, ""), ""},
		{"a list page with its link", "GET", "/books?limit=1", "", 200, map[string]string{"Content-Type": "application/json", "Link": `</books?after=abc&limit=1>; rel="next"`}, `[]`, ""},
		{"a misdirected probe", "GET", "/healthz", "", 421, problemJSON, prob("misdirected", 421, ""), ""},
		{"a misdirected probe as another problem", "GET", "/metrics", "", 421, problemJSON, prob("not-found", 421, ""), "response"},
		{"a bodyless cancel from another origin", "POST", "/orders/018f2b1e-0000-7000-8000-000000000001/cancel", "", 403, problemJSON, prob("cross-origin", 403, ""), ""},
		{"a cross-origin PUT of a book", "PUT", "/books/018f2b1e-0000-7000-8000-000000000001", "", 403, problemJSON, prob("cross-origin", 403, ""), ""},
		{"a malformed link", "GET", "/books?limit=1", "", 200, map[string]string{"Content-Type": "application/json", "Link": `</books?after=abc>; rel=next`}, `[]`, "Link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, reqBody, resp, body := exchange(tc.method, tc.target, tc.reqBody, tc.status, tc.header, tc.body)
			checked, err := c.Check("", req, reqBody, resp, body)
			if !checked {
				t.Fatalf("%s %s: no operation found", tc.method, tc.target)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("want no error, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("want an error about %q, got %v", tc.wantErr, err)
			}
		})
	}
	// A path no document has is not checked when it is answered 404 (a deliberate request
	// to nowhere), and is an error when it is answered: an undocumented route.
	req, reqBody, resp, body := exchange("GET", "/nowhere", "", 404, problemJSON, prob("not-found", 404, ""))
	if checked, err := c.Check("", req, reqBody, resp, body); checked || err != nil {
		t.Errorf("GET /nowhere answered 404: checked %v, %v", checked, err)
	}
	// The Host check answers 421 on any path, one no document has too: that answer is
	// checked against the service's Misdirected response.
	req, reqBody, resp, body = exchange("GET", "/nowhere", "", 421, problemJSON, prob("misdirected", 421, ""))
	if checked, err := c.Check("ordering", req, reqBody, resp, body); !checked || err != nil {
		t.Errorf("GET /nowhere answered 421: checked %v, %v", checked, err)
	}
	req, reqBody, resp, body = exchange("GET", "/nowhere", "", 421, problemJSON, prob("not-found", 421, ""))
	if _, err := c.Check("ordering", req, reqBody, resp, body); err == nil || !strings.Contains(err.Error(), "response 421") {
		t.Errorf("GET /nowhere answered 421 with a not-found problem: %v", err)
	}
	req, reqBody, resp, body = exchange("GET", "/orders", "", 200, map[string]string{"Content-Type": "application/json"}, "[]")
	if _, err := c.Check("ordering", req, reqBody, resp, body); err == nil || !strings.Contains(err.Error(), "document the route") {
		t.Errorf("an undocumented route answered 200: %v", err)
	}
}

// TestValidateEvent: a valid event passes; each kind of drift of its envelope or data fails.
func TestValidateEvent(t *testing.T) {
	valid := `{"specversion":"1.0","id":"018f2b1e-0000-7000-8000-000000000009","source":"bookstore/inventory","type":"inventory.stock-rejected.v1","subject":"018f2b1e-0000-7000-8000-000000000001","time":"2026-11-29T21:00:00Z","datacontenttype":"application/json","sequence":"1","data":{"order_id":"018f2b1e-0000-7000-8000-000000000001","customer_email":"ada@example.com","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000002","quantity":2}],"reason":"insufficient stock"}}`
	if err := ValidateEvent([]byte(valid)); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	if err := ValidateMessage(ContentType, "018f2b1e-0000-7000-8000-000000000009", "inventory.stock-rejected.v1", []byte(valid)); err != nil {
		t.Errorf("valid message: %v", err)
	}
	for name, body := range map[string]string{
		"a renamed data field":  strings.Replace(valid, `"reason"`, `"why"`, 1),
		"a quantity of 0":       strings.Replace(valid, `"quantity":2`, `"quantity":0`, 1),
		"no specversion":        strings.Replace(valid, `"specversion":"1.0",`, ``, 1),
		"an unknown version":    strings.Replace(valid, `stock-rejected.v1`, `stock-rejected.v2`, 1),
		"an id that is no UUID": strings.Replace(valid, `"id":"018f2b1e-0000-7000-8000-000000000009"`, `"id":"x"`, 1),
		"no sequence":           strings.Replace(valid, `"sequence":"1",`, ``, 1),
	} {
		if err := ValidateEvent([]byte(body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := ValidateMessage("application/json", "other", "inventory.stock-rejected.v1", []byte(valid)); err == nil {
		t.Error("a message with another content type and message_id: no error")
	}
}
