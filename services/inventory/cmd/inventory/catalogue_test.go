package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv"
)

// The catalogue's bounds: GET /books a page at a time, PUT /books/{id} an administrative
// operation, and no more than contracts.MaxBooks books.

// addBooks inserts n books with fresh ids straight into the database.
func addBooks(t *testing.T, databaseURL string, n int) {
	t.Helper()
	db := testenv.Pool(t, databaseURL)
	if _, err := db.Exec(context.Background(),
		`WITH b AS (INSERT INTO books (id, title) SELECT gen_random_uuid(), 'Book ' || i FROM generate_series(1, $1) AS i RETURNING id)
		 INSERT INTO stock_levels (book_id, version, on_hand, reserved) SELECT id, 1, 1, 0 FROM b`, n); err != nil {
		t.Fatal(err)
	}
}

// bookIDs is the ids of the books in the database, in id order.
func bookIDs(t *testing.T, databaseURL string) []string {
	t.Helper()
	rows, err := testenv.Pool(t, databaseURL).Query(context.Background(), "SELECT id::text FROM books ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestGETBooksWalksTheWholeCatalogueAPageAtATimeByItsNextLinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	addBooks(t, e.databaseURL, 140) // and the 10 of the seed
	want := bookIDs(t, e.databaseURL)
	if len(want) != 150 {
		t.Fatalf("%d books in the database, want 150", len(want))
	}

	t.Run("without a limit, a page is 100 books and says where the rest are", func(t *testing.T) {
		resp, body := request(t, http.MethodGet, base+"/books", "")
		var books []stock.Book
		decodeJSON(t, body, &books)
		if resp.StatusCode != http.StatusOK || len(books) != httpapi.DefaultPageLimit {
			t.Fatalf("GET /books: %d, %d books; want 200 and %d", resp.StatusCode, len(books), httpapi.DefaultPageLimit)
		}
		if next := httpapi.NextLink(resp.Header); !strings.HasPrefix(next, "/books?after=") {
			t.Errorf("Link %q: want a next link to /books?after=...", resp.Header.Get("Link"))
		}
	})

	t.Run("following the next links with limit=7 sees every book once, in id order", func(t *testing.T) {
		var seen []string
		pages := 0
		next := "/books?limit=7"
		for next != "" {
			resp, body := request(t, http.MethodGet, base+next, "")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %s", next, resp.StatusCode, body)
			}
			var books []stock.Book
			decodeJSON(t, body, &books)
			pages++
			next = httpapi.NextLink(resp.Header)
			if next != "" && (len(books) != 7 || !strings.Contains(next, "limit=7")) {
				t.Errorf("page %d: %d books, next %q; want 7 and the limit kept", pages, len(books), next)
			}
			for _, b := range books {
				seen = append(seen, b.ID.String())
			}
			if pages > 30 {
				t.Fatal("more than 30 pages for 150 books")
			}
		}
		if strings.Join(seen, ",") != strings.Join(want, ",") {
			t.Errorf("walked %d books, want the %d of the database exactly once in id order", len(seen), len(want))
		}
		if pages != 22 { // 21 pages of 7 and the last of 3, which has no next link
			t.Errorf("%d pages, want 22", pages)
		}
	})

	t.Run("a page that ends the catalogue exactly has no next link", func(t *testing.T) {
		resp, body := request(t, http.MethodGet, base+"/books?limit=150", "")
		var books []stock.Book
		decodeJSON(t, body, &books)
		if len(books) != 150 || resp.Header.Get("Link") != "" {
			t.Errorf("limit=150: %d books, Link %q; want 150 and none", len(books), resp.Header.Get("Link"))
		}
	})
}

func TestAListRefusesALimitOrCursorItCannotHaveMeantWith400NamingIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	for query, field := range map[string]string{
		"limit=0": "limit", "limit=-1": "limit", "limit=abc": "limit", "limit=1001": "limit", "limit=": "limit",
		"after=garbage": "after", "after=": "after", "after=" + url.QueryEscape(dune.String()): "after",
	} {
		resp, body := request(t, http.MethodGet, base+"/books?"+query, "")
		p := problem(t, resp, body, http.StatusBadRequest)
		if p.Type != httpapi.ProblemType+"malformed" || len(p.Errors) != 1 || p.Errors[0].Field != field {
			t.Errorf("?%s: %+v, want a malformed problem naming %s", query, p, field)
		}
	}
}

func TestPUTBooksIsForbiddenUnlessINVENTORY_ADMINIs1AndChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e) // INVENTORY_ADMIN unset: 0
	db := testenv.Pool(t, e.databaseURL)
	before := testenv.Count(t, db, "SELECT on_hand FROM book_stock WHERE id = $1", dune)

	newID := uuid.NewString()
	for _, id := range []string{newID, dune.String()} {
		resp, body := request(t, http.MethodPut, base+"/books/"+id, `{"title": "Reset", "on_hand": 0}`)
		p := problem(t, resp, body, http.StatusForbidden)
		if p.Type != httpapi.ProblemType+"admin-disabled" || !strings.Contains(p.Detail, "INVENTORY_ADMIN=1") {
			t.Errorf("PUT /books/%s: %+v, want admin-disabled naming INVENTORY_ADMIN=1", id, p)
		}
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM books WHERE id = $1", newID); n != 0 {
		t.Error("a refused PUT created a book")
	}
	if n := testenv.Count(t, db, "SELECT on_hand FROM book_stock WHERE id = $1 AND title = 'Dune'", dune); n != before {
		t.Errorf("Dune's on_hand is %d after a refused PUT, want %d", n, before)
	}
	// Reading is for everyone.
	if resp, body := request(t, http.MethodGet, base+"/books/"+dune.String(), ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET Dune: %d %s", resp.StatusCode, body)
	}

	// Anything but 0 or 1 stops the service at start.
	for _, v := range []string{"yes", "true", "2"} {
		// Refused before anything starts; were it not, the service would run until ctx ends.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := run(ctx, nil, func(k string) string {
			if k == "INVENTORY_ADMIN" {
				return v
			}
			return e.vars()[k]
		}, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "INVENTORY_ADMIN") {
			t.Errorf("INVENTORY_ADMIN=%s: %v, want a start-up error naming it", v, err)
		}
	}
}

// PUTs racing for the last places of the catalogue: exactly as many get in as there are
// places, however they interleave; a book already there can still be replaced.
func TestTheCatalogueTakesNoNewBookBeyondItsMaximumEvenUnderConcurrentPUTs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e, "INVENTORY_ADMIN", "1")
	db := testenv.Pool(t, e.databaseURL)
	const places = 3
	addBooks(t, e.databaseURL, contracts.MaxBooks-10-places)

	statuses := make([]int, 12)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			resp, _ := request(t, http.MethodPut, base+"/books/"+uuid.NewString(), fmt.Sprintf(`{"title": "Racer %d", "on_hand": 1}`, i))
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
		default:
			t.Errorf("a racing PUT answered %d, want 201 or 409", s)
		}
	}
	if created != places {
		t.Errorf("%d of the racing PUTs created a book (%v), want %d", created, statuses, places)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM books"); n != contracts.MaxBooks {
		t.Errorf("%d books, want the maximum, %d", n, contracts.MaxBooks)
	}

	resp, body := request(t, http.MethodPut, base+"/books/"+uuid.NewString(), `{"title": "One too many", "on_hand": 1}`)
	p := problem(t, resp, body, http.StatusConflict)
	if p.Type != httpapi.ProblemType+"catalogue-full" || !strings.Contains(p.Detail, "10000") {
		t.Errorf("a book beyond the maximum: %+v, want catalogue-full naming the maximum", p)
	}
	if resp, body := request(t, http.MethodPut, base+"/books/"+dune.String(), `{"title": "Dune", "on_hand": 99}`); resp.StatusCode != http.StatusOK {
		t.Errorf("replacing Dune in a full catalogue: %d %s, want 200", resp.StatusCode, body)
	}
}
