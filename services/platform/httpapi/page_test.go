package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// emailKey is a two-column sort key with a validity rule, as the email provider's.
type emailKey struct {
	CreatedAt time.Time `json:"created_at"`
	ID        uuid.UUID `json:"id"`
}

func (k emailKey) Known() bool { return !k.CreatedAt.IsZero() && k.ID != uuid.Nil }

func cursorOf(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestALimitIsAWholeNumberFrom1To1000GivenOnceAndDefaultsTo100(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		query string
		want  int // 0: a 400 naming limit
	}{
		{"", httpapi.DefaultPageLimit},
		{"?limit=1", 1},
		{"?limit=1000", 1000},
		{"?limit=37&to=a%40b", 37},
		{"?limit=0", 0},
		{"?limit=-1", 0},
		{"?limit=1001", 0},
		{"?limit=abc", 0},
		{"?limit=", 0},
		{"?limit=+5", 0},
		{"?limit=05", 0},
		{"?limit=5.0", 0},
		{"?limit=%205", 0},
		{"?limit=99999999999999999999", 0},
		{"?limit=5&limit=6", 0},
	} {
		p, problem := httpapi.ParsePage[uuid.UUID](httptest.NewRequest(http.MethodGet, "/books"+c.query, nil))
		switch {
		case c.want == 0 && !namesParam(problem, "limit"):
			t.Errorf("%q: %+v, %+v; want a 400 naming limit", c.query, p, problem)
		case c.want != 0 && (problem != nil || p.Limit != c.want || p.After != nil || p.Fetch() != c.want+1):
			t.Errorf("%q: %+v, %+v; want limit %d, no cursor, no problem", c.query, p, problem, c.want)
		}
	}
}

func TestACursorIsOnlyWhatANextLinkCarries(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("018f2b1e-0000-7000-8000-000000000007")
	good := cursorOf(`"` + id.String() + `"`)
	p, problem := httpapi.ParsePage[uuid.UUID](httptest.NewRequest(http.MethodGet, "/books?after="+good, nil))
	if problem != nil || p.After == nil || *p.After != id {
		t.Fatalf("after=%s: %+v %+v, want the id back", good, p, problem)
	}
	for name, after := range map[string]string{
		"garbage":                      "garbage",
		"empty":                        "",
		"padded base64":                base64.URLEncoding.EncodeToString([]byte(`"` + id.String() + `"`)),
		"standard base64 alphabet":     "+/+/",
		"not JSON":                     cursorOf("dune"),
		"JSON null":                    cursorOf("null"),
		"a number":                     cursorOf("42"),
		"not a UUID":                   cursorOf(`"dune"`),
		"another spelling of the UUID": cursorOf(`"` + strings.ReplaceAll(id.String(), "-", "") + `"`),
		"data after the key":           cursorOf(`"` + id.String() + `" 1`),
		"space before the key":         cursorOf(` "` + id.String() + `"`),
	} {
		if _, problem := httpapi.ParsePage[uuid.UUID](httptest.NewRequest(http.MethodGet, "/books?after="+url.QueryEscape(after), nil)); !namesParam(problem, "after") {
			t.Errorf("%s (after=%q): %+v, want a 400 naming after", name, after, problem)
		}
	}
	if _, problem := httpapi.ParsePage[uuid.UUID](httptest.NewRequest(http.MethodGet, "/books?after="+good+"&after="+good, nil)); !namesParam(problem, "after") {
		t.Errorf("after given twice: %+v, want a 400 naming after", problem)
	}

	// A struct key: an unknown field, or a key the list could not have written, is refused.
	at := time.Date(2026, 11, 30, 12, 0, 0, 123000, time.UTC)
	key, _ := json.Marshal(emailKey{CreatedAt: at, ID: id})
	p2, problem := httpapi.ParsePage[emailKey](httptest.NewRequest(http.MethodGet, "/v1/emails?to=a%40b&after="+cursorOf(string(key)), nil))
	if problem != nil || p2.After == nil || !p2.After.CreatedAt.Equal(at) || p2.After.ID != id {
		t.Fatalf("email cursor: %+v %+v", p2, problem)
	}
	for name, after := range map[string]string{
		"unknown field": cursorOf(`{"created_at":"2026-11-30T12:00:00Z","id":"` + id.String() + `","x":1}`),
		"empty object":  cursorOf(`{}`),
		"nil id":        cursorOf(`{"created_at":"2026-11-30T12:00:00Z","id":"` + uuid.Nil.String() + `"}`),
	} {
		if _, problem := httpapi.ParsePage[emailKey](httptest.NewRequest(http.MethodGet, "/v1/emails?after="+after, nil)); !namesParam(problem, "after") {
			t.Errorf("%s: %+v, want a 400 naming after", name, problem)
		}
	}
}

// A list of 7 keys read 3 at a time, through a handler as the services write theirs: every
// key once, in order, in pages of 3, 3 and 1, and the last page has no next link.
func TestFollowingNextLinksWalksEveryItemOnceAndTheLastPageHasNone(t *testing.T) {
	t.Parallel()
	all := []int{2, 3, 5, 7, 11, 13, 17}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, problem := httpapi.ParsePage[int](r)
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		if r.URL.Query().Get("to") != "ada@example.com" {
			http.Error(w, "the next link lost the other parameters", http.StatusTeapot)
			return
		}
		var rows []int // the query: key > after, in order, Fetch() rows at most
		for _, k := range all {
			if (page.After == nil || k > *page.After) && len(rows) < page.Fetch() {
				rows = append(rows, k)
			}
		}
		httpapi.WriteJSON(w, http.StatusOK, httpapi.NextPage(w, r, page, rows, func(k int) int { return k }))
	})
	srv := httptest.NewServer(handler)
	defer srv.Close()

	var seen []int
	var sizes []int
	next := srv.URL + "/primes?to=ada%40example.com&limit=3"
	for next != "" {
		resp, err := http.Get(next)
		if err != nil {
			t.Fatal(err)
		}
		var page []int
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", next, resp.StatusCode, err)
		}
		resp.Body.Close()
		seen, sizes = append(seen, page...), append(sizes, len(page))
		link := httpapi.NextLink(resp.Header)
		if link == "" {
			break
		}
		if !strings.HasPrefix(link, "/primes?") || !strings.Contains(link, "limit=3") || !strings.Contains(link, "to=ada%40example.com") {
			t.Errorf("next link %q: want the path with limit and to kept", link)
		}
		u, err := resp.Request.URL.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		next = u.String()
	}
	if !slices.Equal(seen, all) || !slices.Equal(sizes, []int{3, 3, 1}) {
		t.Errorf("walked %v in pages of %v, want %v in pages of 3, 3, 1", seen, sizes, all)
	}

	// A list that fits its page exactly has no next link: limit+1 rows were asked for and
	// only limit came back.
	rec := httptest.NewRecorder()
	page, _ := httpapi.ParsePage[int](httptest.NewRequest(http.MethodGet, "/primes?limit="+strconv.Itoa(len(all)), nil))
	if got := httpapi.NextPage(rec, httptest.NewRequest(http.MethodGet, "/primes", nil), page, all, func(k int) int { return k }); len(got) != len(all) || rec.Header().Get("Link") != "" {
		t.Errorf("exact fit: %v, Link %q; want every item and no Link", got, rec.Header().Get("Link"))
	}
}

func TestNextLinkFindsRelNextAmongOtherLinks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		headers []string
		want    string
	}{
		{nil, ""},
		{[]string{`</a?after=x>; rel="next"`}, "/a?after=x"},
		{[]string{`</first>; rel="first", </a?after=y>; rel=next`}, "/a?after=y"},
		{[]string{`</prev>; rel="prev"`, `</a?after=z>; title="more"; rel="last next"`}, "/a?after=z"},
		{[]string{`</prev>; rel="prev"`}, ""},
	} {
		h := http.Header{}
		for _, v := range c.headers {
			h.Add("Link", v)
		}
		if got := httpapi.NextLink(h); got != c.want {
			t.Errorf("Link %q: next %q, want %q", c.headers, got, c.want)
		}
	}
}

func namesParam(p *httpapi.Problem, name string) bool {
	return p != nil && p.Status == http.StatusBadRequest && p.Type == httpapi.ProblemType+"malformed" &&
		len(p.Errors) == 1 && p.Errors[0].Field == name && strings.HasPrefix(p.Detail, name+": ")
}

func TestNextPageURLResolvesTheNextLinkAgainstThePageRead(t *testing.T) {
	t.Parallel()
	current, _ := url.Parse("http://127.0.0.1:8082/books?limit=100")
	h := http.Header{"Link": {`</books?after=abc&limit=100>; rel="next"`}}
	next, err := httpapi.NextPageURL(current, h)
	if err != nil || next == nil || next.String() != "http://127.0.0.1:8082/books?after=abc&limit=100" {
		t.Errorf("next page %v (%v), want the link on the page's host", next, err)
	}
	if last, err := httpapi.NextPageURL(current, http.Header{}); last != nil || err != nil {
		t.Errorf("after the last page: %v (%v), want nil", last, err)
	}
}
