package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// printableASCII is the contract's Idempotency-Key: 1 to 255 characters of 0x20-0x7e.
func printableASCII(s string) bool {
	if len(s) < 1 || len(s) > 255 {
		return false
	}
	for _, r := range []byte(s) {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}

// namesOnly fails unless p is a 400 with a detail whose every field error names name.
func namesOnly(t *testing.T, what string, p *httpapi.Problem, name string) {
	t.Helper()
	if p.Status != http.StatusBadRequest || p.Detail == "" || len(p.Errors) == 0 {
		t.Fatalf("%s: problem %+v, want a 400 with a detail", what, p)
	}
	for _, e := range p.Errors {
		if e.Field != name || e.Detail == "" {
			t.Fatalf("%s: problem %+v, want each error to name %s", what, p, name)
		}
	}
	if !strings.Contains(p.Detail, name) {
		t.Fatalf("%s: detail %q does not name %s", what, p.Detail, name)
	}
}

// FuzzIdempotencyKeyIsPrintableASCIIOrA400NamingTheHeader: whatever the client sends as
// Idempotency-Key, one header or two, IdempotencyKey hands over exactly the one header's
// value when it is 1 to 255 printable ASCII characters, "" when there is none, and
// otherwise a 400 naming the header.
func FuzzIdempotencyKeyIsPrintableASCIIOrA400NamingTheHeader(f *testing.F) {
	for _, seed := range []struct {
		key, second string
		two         bool
	}{
		{"order/018f2b1e-0000-7000-8000-000000000001/order-confirmed", "", false},
		{"k", "k", true},
		{"", "", false},
		{"a\x00b", "", false},
		{"\xff", "", false},
		{"é", "", false},
		{"tab\there", "", false},
		{"del\x7f", "", false},
		{strings.Repeat("k", 255), "", false},
		{strings.Repeat("k", 256), "", false},
		{" ", "", false},
		{"line\r\nbreak", "", false},
	} {
		f.Add(seed.key, seed.second, seed.two)
	}
	f.Fuzz(func(t *testing.T, key, second string, two bool) {
		r := &http.Request{Header: http.Header{}}
		if key != "" || two {
			r.Header[httpapi.IdempotencyKeyHeader] = []string{key}
		}
		if two {
			r.Header[httpapi.IdempotencyKeyHeader] = append(r.Header[httpapi.IdempotencyKeyHeader], second)
		}
		got, p := httpapi.IdempotencyKey(r)
		sent := len(r.Header.Values(httpapi.IdempotencyKeyHeader))
		switch {
		case sent == 0 && (got != "" || p != nil):
			t.Fatalf("no header: %q, %+v", got, p)
		case sent == 1 && printableASCII(key) && (got != key || p != nil):
			t.Fatalf("%q: got %q, %+v; want it accepted", key, got, p)
		case sent > 0 && (sent > 1 || !printableASCII(key)):
			if got != "" || p == nil {
				t.Fatalf("%q (%d headers): accepted as %q", key, sent, got)
			}
			namesOnly(t, key, p, httpapi.IdempotencyKeyHeader)
		}
		if got != "" && (!httpapitest.Storable(got) || !httpapi.ValidIdempotencyKey(got)) {
			t.Fatalf("%q: accepted %q", key, got)
		}
	})
}

// parseUUID is the UUID raw spells in one of the forms uuid.Validate knows (canonical,
// upper case, {braced}, urn:uuid:, 32 hex digits), or an error.
func parseUUID(raw string) (uuid.UUID, error) {
	if err := uuid.Validate(raw); err != nil {
		return uuid.Nil, err
	}
	return uuid.Parse(raw)
}

// FuzzPathUUIDIsAUUIDOrA400NamingTheParameter: whatever a path segment holds, PathUUID
// hands over the UUID it spells, or a 400 naming the parameter; never the nil UUID for
// text that is not one.
func FuzzPathUUIDIsAUUIDOrA400NamingTheParameter(f *testing.F) {
	for _, seed := range []string{
		"018f2b1e-0000-7000-8000-000000000001", "018F2B1E-0000-7000-8000-000000000001",
		"00000000-0000-0000-0000-000000000000", "018f2b1e00007000800000000000000001",
		"{018f2b1e-0000-7000-8000-000000000001}", "urn:uuid:018f2b1e-0000-7000-8000-000000000001",
		"", "42", "018f2b1e-0000-7000-8000-00000000000\x00", "018f2b1e-0000-7000-8000-00000000000\xff",
		"018f2b1e-0000-7000-8000-0000000000001", "018f2b1e_0000_7000_8000_000000000001",
		"x018f2b1e-0000-7000-8000-000000000001y", "\xff018f2b1e-0000-7000-8000-000000000001\x00",
		"urn:uuix:018f2b1e-0000-7000-8000-000000000001",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		rctx := chi.NewRouteContext()
		rctx.URLParams.Add("id", raw)
		r := (&http.Request{URL: &url.URL{Path: "/books/x"}, Header: http.Header{}}).
			WithContext(context.WithValue(context.Background(), chi.RouteCtxKey, rctx))
		got, p := httpapi.PathUUID(r, "id")
		want, err := parseUUID(raw)
		switch {
		case err == nil && (p != nil || got != want):
			t.Fatalf("%q: got %v, %+v; want %v", raw, got, p, want)
		case err != nil && p == nil:
			t.Fatalf("%q: accepted as %v", raw, got)
		case err != nil:
			namesOnly(t, raw, p, "id")
			if !utf8.ValidString(p.Detail) || strings.ContainsRune(p.Detail, 0) {
				t.Fatalf("%q: the problem's detail %q is not text", raw, p.Detail)
			}
		}
		if p == nil && !httpapitest.Storable(raw) {
			t.Fatalf("%q: accepted text that is not storable", raw)
		}
	})
}

// FuzzQueryParametersAreStorableTextOrA400NamingThem: whatever the query string holds,
// RequiredQuery hands over a non-empty value of valid UTF-8 without a NUL, QueryUUID a
// UUID, Text agrees with RequiredQuery, and each refusal is a 400 naming the parameter.
func FuzzQueryParametersAreStorableTextOrA400NamingThem(f *testing.F) {
	for _, seed := range []string{
		"to=ada%40example.com", "order_id=018f2b1e-0000-7000-8000-000000000001",
		"to=", "", "to=%00", "to=%ff", "to=a%00b&order_id=x", "to=a;b", "to=%zz", "to=1&to=2",
		"order_id=018F2B1E-0000-7000-8000-000000000001", "order_id=%ff018f2b1e-0000-7000-8000-000000000001%00", "TO=ada", "to=%e2%82", "to=+", "to&order_id",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := &http.Request{URL: &url.URL{Path: "/x", RawQuery: rawQuery}, Header: http.Header{}}
		want := r.URL.Query().Get("to")
		got, p := httpapi.RequiredQuery(r, "to")
		switch {
		case want == "":
			if p == nil {
				t.Fatalf("%q: a missing parameter accepted as %q", rawQuery, got)
			}
			namesOnly(t, rawQuery, p, "to")
		case httpapitest.Storable(want):
			if p != nil || got != want {
				t.Fatalf("%q: got %q, %+v; want %q", rawQuery, got, p, want)
			}
		default:
			if p == nil {
				t.Fatalf("%q: accepted %q", rawQuery, got)
			}
			namesOnly(t, rawQuery, p, "to")
		}
		if tp := httpapi.Text("to", want); (tp == nil) != httpapitest.Storable(want) {
			t.Fatalf("%q: Text(%q) = %+v", rawQuery, want, tp)
		}

		id, p := httpapi.QueryUUID(r, "order_id")
		parsed, err := parseUUID(r.URL.Query().Get("order_id"))
		switch {
		case err == nil && (p != nil || id != parsed):
			t.Fatalf("%q: got %v, %+v; want %v", rawQuery, id, p, parsed)
		case err != nil:
			if p == nil {
				t.Fatalf("%q: accepted %v", rawQuery, id)
			}
			namesOnly(t, rawQuery, p, "order_id")
		}
	})
}

// position is a list's sort key as the email provider's is: a time and an id, neither zero.
type position struct {
	CreatedAt time.Time `json:"created_at"`
	ID        uuid.UUID `json:"id"`
}

func (p position) Known() bool { return !p.CreatedAt.IsZero() && p.ID != uuid.Nil }

// kind is a list's sort key as notification's is: one of a few words.
type kind string

func (k kind) Known() bool { return k == "order-confirmed" || k == "order-rejected" }

// checkPage fails unless ParsePage[K] of query either refuses it with a 400 naming limit
// or after, or reads a limit of 1 to MaxPageLimit spelled as the one limit given (the
// default without one), and an after that is exactly the cursor of the key it decoded
// (unpadded base64url of its JSON) and valid by the key's own rule.
func checkPage[K any](t *testing.T, rawQuery string) {
	t.Helper()
	r := &http.Request{URL: &url.URL{Path: "/x", RawQuery: rawQuery}, Header: http.Header{}}
	q := r.URL.Query()
	page, p := httpapi.ParsePage[K](r)
	if p != nil {
		if p.Status != http.StatusBadRequest || p.Detail == "" || len(p.Errors) != 1 ||
			(p.Errors[0].Field != httpapi.LimitParam && p.Errors[0].Field != httpapi.AfterParam) {
			t.Fatalf("%q: problem %+v, want a 400 naming limit or after", rawQuery, p)
		}
		return
	}
	limits, hasLimit := q[httpapi.LimitParam]
	switch {
	case page.Limit < 1 || page.Limit > httpapi.MaxPageLimit:
		t.Fatalf("%q: limit %d", rawQuery, page.Limit)
	case hasLimit && (len(limits) != 1 || strconv.Itoa(page.Limit) != limits[0]):
		t.Fatalf("%q: limit %d read from %q", rawQuery, page.Limit, limits)
	case !hasLimit && page.Limit != httpapi.DefaultPageLimit:
		t.Fatalf("%q: limit %d without one given", rawQuery, page.Limit)
	}
	afters, hasAfter := q[httpapi.AfterParam]
	if hasAfter != (page.After != nil) {
		t.Fatalf("%q: after %v", rawQuery, page.After)
	}
	if !hasAfter {
		return
	}
	b, err := json.Marshal(*page.After)
	if err != nil || len(afters) != 1 || base64.RawURLEncoding.EncodeToString(b) != afters[0] {
		t.Fatalf("%q: after %+v is not the cursor %q (%s, %v)", rawQuery, *page.After, afters, b, err)
	}
	if k, ok := any(*page.After).(httpapi.CursorKey); ok && !k.Known() {
		t.Fatalf("%q: after %+v is not a key the list writes", rawQuery, *page.After)
	}
	if s, ok := any(*page.After).(kind); ok && !httpapitest.Storable(string(s)) {
		t.Fatalf("%q: after %q is not storable", rawQuery, s)
	}
}

// FuzzPageIsWithinBoundsOrA400NamingTheParameter: whatever the query string of a list
// request, ParsePage answers a 400 naming limit or after, or a page of 1 to 1000 items
// after a key that is exactly what a next link of that list would carry, for the three
// kinds of sort key the APIs use (an id, a time and an id, a word).
func FuzzPageIsWithinBoundsOrA400NamingTheParameter(f *testing.F) {
	cursor := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	id := uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")
	at := time.Date(2026, 11, 29, 21, 0, 0, 123456000, time.UTC)
	for _, seed := range []string{
		"", "limit=1", "limit=1000", "limit=1001", "limit=0", "limit=-1", "limit=+5", "limit=05", "limit=5.0",
		"limit=%205", "limit=99999999999999999999", "limit=5&limit=6", "limit=", "LIMIT=5",
		"after=" + cursor(id), "after=" + cursor(id) + "&after=" + cursor(id), "after=", "after=null",
		"after=" + cursor(nil), "after=" + cursor(strings.ToUpper(id.String())), "after=" + cursor(uuid.Nil),
		"after=" + cursor(id) + "=", "after=" + strings.TrimRight(base64.URLEncoding.EncodeToString([]byte(`"`+id.String()+`"`)), "="),
		"after=" + base64.StdEncoding.EncodeToString([]byte(`"`+id.String()+`"`)),
		"after=" + cursor(position{CreatedAt: at, ID: id}),
		"after=" + cursor(position{CreatedAt: at.In(time.FixedZone("", 3600)), ID: id}),
		"after=" + cursor(position{ID: id}),
		"after=" + cursor(map[string]any{"created_at": at, "id": id, "x": 1}),
		"after=" + base64.RawURLEncoding.EncodeToString([]byte(`{"created_at":"2026-11-29T21:00:00Z","id":"`+id.String()+`","id":"`+id.String()+`"}`)),
		"after=" + base64.RawURLEncoding.EncodeToString([]byte(`{"CREATED_AT":"2026-11-29T21:00:00Z","id":"`+id.String()+`"}`)),
		"after=" + base64.RawURLEncoding.EncodeToString([]byte(`{"created_at":"10000-01-01T00:00:00Z","id":"`+id.String()+`"}`)),
		"after=" + cursor("order-confirmed"), "after=" + cursor("order-shipped"), "after=" + cursor("order-confirmed\u0000"),
		"after=" + base64.RawURLEncoding.EncodeToString([]byte(`"order-confirmed"]`)),
		"after=" + base64.RawURLEncoding.EncodeToString([]byte("\"\xff\"")),
		"limit=10&after=" + cursor(id),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		checkPage[uuid.UUID](t, rawQuery)
		checkPage[position](t, rawQuery)
		checkPage[kind](t, rawQuery)
	})
}
