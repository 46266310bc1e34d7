package stock

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// FuzzPutBookRequestIsAcceptedOnlyWhenValid: whatever the body of PUT /books/{id}, the
// API answers a 400, 413 or 422 with a detail, never a 5xx, or takes a book that keeps
// docs/contracts.md, checked here without Valid's help: both fields present, a title of
// 1 to 500 characters of storable text, on_hand 0 to 1,000,000,000.
func FuzzPutBookRequestIsAcceptedOnlyWhenValid(f *testing.F) {
	for _, seed := range []string{
		`{"title":"Dune","on_hand":10}`,
		`{"title":"Dune","on_hand":0}`,
		`{"title":"Dune","on_hand":1000000000}`,
		`{"title":"Dune","on_hand":1000000001}`,
		`{"title":"Dune","on_hand":-1}`,
		`{"title":"Dune","on_hand":1e400}`,
		`{"title":"Dune","on_hand":99999999999999999999}`,
		`{"title":"Dune","on_hand":1.5}`,
		`{"title":"Dune","on_hand":"10"}`,
		`{"title":"Dune","on_hand":null}`,
		`{"title":null,"on_hand":1}`,
		`{"title":"","on_hand":1}`,
		`{"title":"Du\u0000ne","on_hand":1}`,
		"{\"title\":\"Du\xffne\",\"on_hand\":1}",
		`{"title":"\ud800","on_hand":1}`,
		`{"title":"` + strings.Repeat("é", 500) + `","on_hand":1}`,
		`{"title":"` + strings.Repeat("é", 501) + `","on_hand":1}`,
		`{"Title":"Dune","on_hand":1}`,
		`{"title":"Dune","title":"Emma","on_hand":1}`,
		`{"title":"Dune","on_hand":1}]`,
		`{"title":"Dune","on_hand":1,"reserved":5}`,
		`{"title":["Dune"],"on_hand":1}`,
		"", "null", "[]", "{}", `"x"`, "\xff", strings.Repeat("{", 5000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var req PutBookRequest
		p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPut, "/books/x", strings.NewReader(body)), &req)
		if p != nil {
			switch {
			case p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge && p.Status != http.StatusUnprocessableEntity:
				t.Fatalf("%q: status %d", body, p.Status)
			case p.Detail == "":
				t.Fatalf("%q: a %d without a detail", body, p.Status)
			case p.Status == http.StatusUnprocessableEntity && len(p.Errors) == 0:
				t.Fatalf("%q: a 422 naming no field", body)
			}
			return
		}
		switch {
		case req.Title == nil || req.OnHand == nil:
			t.Fatalf("%q: accepted without a title or on_hand", body)
		case *req.Title == "" || utf8.RuneCountInString(*req.Title) > MaxTitleLen || !httpapitest.Storable(*req.Title):
			t.Fatalf("%q: accepted title %q", body, *req.Title)
		case *req.OnHand < 0 || *req.OnHand > 1_000_000_000:
			t.Fatalf("%q: accepted on_hand %d", body, *req.OnHand)
		}
	})
}
