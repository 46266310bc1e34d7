// Package httpapitest holds what the tests of every API share: what the fuzz targets
// check of an answer, written apart from the code they check (an oracle that reused
// httpapi's own rules would agree with any bug in them), and the benchmark of a check in
// front of a handler.
package httpapitest

import (
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// Storable reports whether Postgres takes s as text: valid UTF-8 without a NUL.
func Storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// PlainAddress checks the contract's "plain email address of at most 254 characters, on
// a domain name" without net/mail: one @ between a local part and a domain, neither empty;
// a domain with a dot and no IP literal; no white space, no control or formatting (bidi)
// character, none of the specials a display name or a comment would need.
func PlainAddress(s string) bool {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 || at == len(s)-1 || len(s) > 254 || !Storable(s) {
		return false
	}
	if domain := s[at+1:]; !strings.Contains(domain, ".") || strings.ContainsAny(domain, "[]") {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || strings.ContainsRune(`"(),:;<>\`, r) {
			return false
		}
	}
	return true
}

// RequireClientProblem fails the test unless p is what a client's bad request earns: a
// 400, 413 or 422 with a detail, every field error naming its field and what is wrong,
// and a 422 naming at least one. input is shown when it fails.
func RequireClientProblem(t testing.TB, input string, p *httpapi.Problem) {
	t.Helper()
	switch {
	case p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge && p.Status != http.StatusUnprocessableEntity:
		t.Fatalf("%q: status %d", input, p.Status)
	case p.Detail == "":
		t.Fatalf("%q: a %d without a detail", input, p.Status)
	case p.Status == http.StatusUnprocessableEntity && len(p.Errors) == 0:
		t.Fatalf("%q: a 422 naming no field", input)
	}
	for _, e := range p.Errors {
		if e.Field == "" || e.Detail == "" {
			t.Fatalf("%q: field error %+v", input, e)
		}
	}
}
