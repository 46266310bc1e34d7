package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

type bookRequest struct {
	Title  string `json:"title"`
	OnHand int    `json:"on_hand"`
}

func (b bookRequest) Valid() map[string]string {
	if b.OnHand < 0 {
		return map[string]string{"on_hand": "must not be negative"}
	}
	return nil
}

func TestDecodeValidNamesTheFieldItRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body   string
		status int // 0: no problem
		field  string
	}{
		{`{"title": "Dune", "on_hand": 3}`, 0, ""},
		{`{"title": "Dune", "on_hand": -1}`, http.StatusUnprocessableEntity, "on_hand"},
		{`{"title": "Dune", "isbn": "x"}`, http.StatusBadRequest, "isbn"},
		{`{"title": `, http.StatusBadRequest, ""},
	} {
		var req bookRequest
		p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPut, "/books/1", strings.NewReader(c.body)), &req)
		switch {
		case c.status == 0 && (p != nil || req.Title != "Dune" || req.OnHand != 3):
			t.Errorf("%s: %+v %+v, want it decoded without a problem", c.body, req, p)
		case c.status != 0 && (p == nil || p.Status != c.status):
			t.Errorf("%s: problem %+v, want status %d", c.body, p, c.status)
		case c.field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != c.field):
			t.Errorf("%s: problem %+v, want it to name %s", c.body, p, c.field)
		}
	}
}

type orderRequest struct {
	CustomerEmail string      `json:"customer_email"`
	Lines         []orderLine `json:"lines"`
}

type orderLine struct {
	BookID   uuid.UUID `json:"book_id"`
	Quantity int32     `json:"quantity"`
}

func (orderRequest) Valid() map[string]string { return nil }

// What encoding/json alone lets through, each refused with a 400 that names the field by
// its path, and what it must still accept.
func TestDecodeRefusesWhatJSONAloneLetsThrough(t *testing.T) {
	t.Parallel()
	const book = "018f2b1e-0000-7000-8000-000000000001"
	line := `{"book_id":"` + book + `","quantity":1}`
	for _, c := range []struct {
		name, body string
		field      string // "" : the problem names no field
		detail     string // a part of the problem's detail
	}{
		{"data after the object", `{"customer_email":"a@b.c","lines":[]} ]`, "", "after its JSON object"},
		{"braces after the object", `{"customer_email":"a@b.c","lines":[]}}}}`, "", "after its JSON object"},
		{"a second object", `{"customer_email":"a@b.c"} {"customer_email":"x@y.z"}`, "", "after its JSON object"},
		{"a key twice", `{"customer_email":"a@b.c","customer_email":"x@y.z"}`, "customer_email", "more than once"},
		{"a key twice in a line", `{"lines":[{"quantity":1,"quantity":2}]}`, "lines[0].quantity", "more than once"},
		{"a key in another case", `{"Customer_Email":"a@b.c"}`, "Customer_Email", "unknown field"},
		{"an unknown key in a line", `{"lines":[` + line + `,{"isbn":"x"}]}`, "lines[1].isbn", "unknown field"},
		{"null for the body", `null`, "", "must be a JSON object, not null"},
		{"an array for the body", `[]`, "", "must be a JSON object, not an array"},
		{"a string for a number", `{"lines":[{"book_id":"` + book + `","quantity":"1"}]}`, "lines[0].quantity", "expected an integer, got a string"},
		{"a fraction for an integer", `{"lines":[{"book_id":"` + book + `","quantity":1.5}]}`, "lines[0].quantity", "expected an integer in range, got 1.5"},
		{"an integer out of range", `{"lines":[{"book_id":"` + book + `","quantity":3000000000}]}`, "lines[0].quantity", "in range"},
		{"an object for a string", `{"customer_email":{}}`, "customer_email", "expected a string, got an object"},
		{"an object for the lines", `{"lines":{}}`, "lines", "expected an array, got an object"},
		{"a malformed UUID", `{"lines":[{"book_id":"abc","quantity":1}]}`, "lines[0].book_id", "lines[0].book_id: "},
		{"a NUL in a string", `{"customer_email":"a\u0000b@c.d"}`, "customer_email", "NUL"},
		{"a NUL in a key", `{"a\u0000":1}`, "a\x00", "NUL"},
		{"invalid UTF-8", "{\"customer_email\":\"\xff\"}", "", "not valid UTF-8"},
		{"a body cut short", `{"lines":[` + line, "", "ends in the middle"},
		{"an empty body", ``, "", "empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var req orderRequest
			p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(c.body)), &req)
			if p == nil {
				t.Fatalf("%s: accepted as %+v", c.body, req)
			}
			if p.Status != http.StatusBadRequest || !strings.Contains(p.Detail, c.detail) {
				t.Errorf("%s: %d %q, want 400 with %q", c.body, p.Status, p.Detail, c.detail)
			}
			switch {
			case c.field == "" && len(p.Errors) != 0:
				t.Errorf("%s: names %+v, want no field", c.body, p.Errors)
			case c.field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != c.field):
				t.Errorf("%s: names %+v, want %q", c.body, p.Errors, c.field)
			}
		})
	}

	for _, body := range []string{
		`{"customer_email":"a@b.c","lines":[` + line + `]}`,
		" \n{\"customer_email\":\"ünïcödé@b.c\",\"lines\":[" + line + "]}\n ",
		`{"customer_email":null,"lines":[` + line + `]}`, // null: missing, for Valid to judge
		`{}`,
	} {
		var req orderRequest
		if p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body)), &req); p != nil {
			t.Errorf("%s: refused: %+v", body, p)
		}
	}
}

// Whatever the body, Decode answers with a 400 or 413, or hands over text Postgres can
// store. `go test -fuzz FuzzDecode ./services/platform/httpapi/` searches further than
// the seeds below, which make test runs.
func FuzzDecodeHandsOverOnlyStorableText(f *testing.F) {
	for _, seed := range []string{
		`{"customer_email":"a@b.c","lines":[{"book_id":"018f2b1e-0000-7000-8000-000000000001","quantity":1}]}`,
		`{"customer_email":"a\u0000b"}`, "{\"customer_email\":\"\xff\"}", `{"lines":[{"quantity":1e400}]}`, `{} ]`, `null`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var req orderRequest
		p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body)), &req)
		if p != nil {
			if p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("%q: status %d", body, p.Status)
			}
			return
		}
		if !utf8.ValidString(req.CustomerEmail) || strings.ContainsRune(req.CustomerEmail, 0) {
			t.Fatalf("%q: accepted %q", body, req.CustomerEmail)
		}
	})
}
