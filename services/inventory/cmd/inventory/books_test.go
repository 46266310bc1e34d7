package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv"
)

// The HTTP API of the contracts, against one service started in-process.

func TestBooksAPIFollowsTheContracts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e, "INVENTORY_ADMIN", "1")

	t.Run("a fresh database lists the seeded catalogue, Dune first", func(t *testing.T) {
		resp, body := request(t, http.MethodGet, base+"/books", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /books: %d %s", resp.StatusCode, body)
		}
		var books []stock.Book
		decodeJSON(t, body, &books)
		if len(books) < 8 {
			t.Fatalf("%d books, want at least 8", len(books))
		}
		for i, b := range books {
			want := fmt.Sprintf("018f2b1e-0000-7000-8000-%012d", i+1)
			if b.ID.String() != want || b.Title == "" || b.OnHand <= 0 || b.Reserved != 0 || b.Available != b.OnHand {
				t.Errorf("book %d = %+v, want id %s, a title, stock on hand, nothing reserved", i, b, want)
			}
		}
		if books[0].Title != "Dune" {
			t.Errorf("first book %q, want Dune", books[0].Title)
		}
	})

	t.Run("get one book", func(t *testing.T) {
		resp, body := request(t, http.MethodGet, base+"/books/"+dune.String(), "")
		var b stock.Book
		decodeJSON(t, body, &b)
		if resp.StatusCode != http.StatusOK || b.ID != dune || b.Title != "Dune" || b.Available != b.OnHand-b.Reserved {
			t.Errorf("GET Dune: %d %+v", resp.StatusCode, b)
		}
	})

	t.Run("unknown book is 404 problem", func(t *testing.T) {
		resp, body := request(t, http.MethodGet, base+"/books/"+uuid.NewString(), "")
		p := problem(t, resp, body, http.StatusNotFound)
		if !strings.HasSuffix(p.Type, "#not-found") {
			t.Errorf("type %q", p.Type)
		}
	})

	t.Run("an id that is not a UUID is 400", func(t *testing.T) {
		resp, body := request(t, http.MethodGet, base+"/books/dune", "")
		problem(t, resp, body, http.StatusBadRequest)
	})

	t.Run("PUT creates, then replaces with absolute values", func(t *testing.T) {
		id := uuid.NewString()
		resp, body := request(t, http.MethodPut, base+"/books/"+id, `{"title": "Kindred", "on_hand": 7}`)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/books/"+id {
			t.Fatalf("first PUT: %d %q %s, want 201 with Location", resp.StatusCode, resp.Header.Get("Location"), body)
		}
		// A retry after a lost response changes nothing: same body, same state.
		for range 2 {
			resp, body = request(t, http.MethodPut, base+"/books/"+id, `{"title": "Kindred", "on_hand": 7}`)
			var b stock.Book
			decodeJSON(t, body, &b)
			if resp.StatusCode != http.StatusOK || b.Title != "Kindred" || b.OnHand != 7 || b.Available != 7 {
				t.Fatalf("repeated PUT: %d %+v, want 200 and the same book", resp.StatusCode, b)
			}
		}
		request(t, http.MethodPut, base+"/books/"+id, `{"title": "Kindred (2nd ed.)", "on_hand": 12}`)
		_, body = request(t, http.MethodGet, base+"/books/"+id, "")
		var b stock.Book
		decodeJSON(t, body, &b)
		if b.Title != "Kindred (2nd ed.)" || b.OnHand != 12 {
			t.Errorf("after replace: %+v", b)
		}
	})

	t.Run("PUT below reserved is 422 naming on_hand", func(t *testing.T) {
		db := testenv.Pool(t, e.databaseURL)
		hyperion := "018f2b1e-0000-7000-8000-000000000005"
		if _, err := db.Exec(context.Background(), "UPDATE stock_levels SET reserved = 3 WHERE book_id = $1", hyperion); err != nil {
			t.Fatal(err)
		}
		resp, body := request(t, http.MethodPut, base+"/books/"+hyperion, `{"title": "Hyperion", "on_hand": 2}`)
		p := problem(t, resp, body, http.StatusUnprocessableEntity)
		if len(p.Errors) != 1 || p.Errors[0].Field != "on_hand" || !strings.Contains(p.Detail, "3 copies reserved") {
			t.Errorf("problem = %+v, want on_hand named with the reserved count", p)
		}
		if n := testenv.Count(t, db, "SELECT on_hand FROM book_stock WHERE id = $1", hyperion); n != 3 {
			t.Errorf("on_hand = %d after a refused PUT, want 3 (unchanged)", n)
		}
		resp, body = request(t, http.MethodPut, base+"/books/"+hyperion, `{"title": "Hyperion", "on_hand": 3}`)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("PUT on_hand = reserved: %d %s, want 200", resp.StatusCode, body)
		}
	})

	bad := []struct {
		name, body string
		status     int
		field      string
	}{
		{"not JSON", `{"title": `, http.StatusBadRequest, ""},
		{"empty body", ``, http.StatusBadRequest, ""},
		{"unknown field", `{"title": "X", "on_hand": 1, "price": 9}`, http.StatusBadRequest, "price"},
		{"on_hand of the wrong type", `{"title": "X", "on_hand": "many"}`, http.StatusBadRequest, "on_hand"},
		{"title missing", `{"on_hand": 1}`, http.StatusUnprocessableEntity, "title"},
		{"on_hand missing", `{"title": "X"}`, http.StatusUnprocessableEntity, "on_hand"},
		{"on_hand negative", `{"title": "X", "on_hand": -1}`, http.StatusUnprocessableEntity, "on_hand"},
		{"title too long", `{"title": "` + strings.Repeat("x", stock.MaxTitleLen+1) + `", "on_hand": 1}`, http.StatusUnprocessableEntity, "title"},
	}
	for _, tc := range bad {
		t.Run("bad PUT: "+tc.name, func(t *testing.T) {
			id := uuid.NewString()
			resp, body := request(t, http.MethodPut, base+"/books/"+id, tc.body)
			p := problem(t, resp, body, tc.status)
			if tc.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != tc.field) {
				t.Errorf("errors = %+v, want field %q named", p.Errors, tc.field)
			}
			if resp, _ := request(t, http.MethodGet, base+"/books/"+id, ""); resp.StatusCode != http.StatusNotFound {
				t.Errorf("a refused PUT created the book: GET %d", resp.StatusCode)
			}
		})
	}

	t.Run("probes", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			if resp, body := request(t, http.MethodGet, base+path, ""); resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %d %s", path, resp.StatusCode, body)
			}
		}
	})
}

func problem(t *testing.T, resp *http.Response, body []byte, status int) httpapi.Problem {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p httpapi.Problem
	decodeJSON(t, body, &p)
	if p.Status != status || p.Title == "" || p.Type == "" || p.Detail == "" {
		t.Errorf("problem %+v lacks type, title, status or detail", p)
	}
	return p
}
