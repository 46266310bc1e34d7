package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Pagination of a list endpoint. A list is never cut silently: the server answers at most
// limit items (a JSON array, as before), and when more follow it says so with an RFC 8288
// header, Link: </books?after=...&limit=100>; rel="next", which a client follows until it
// is absent. The cursor in after is the sort key of the page's last item, opaque to the
// client: keyset pagination, so a row inserted or removed between two pages neither
// repeats nor skips the rows around it, and a deep page costs what the first one does.
const (
	// DefaultPageLimit is the page size when the request gives no limit.
	DefaultPageLimit = 100
	// MaxPageLimit is the largest limit a request may ask for.
	MaxPageLimit = 1000
)

// Query parameters of a list endpoint.
const (
	LimitParam = "limit"
	AfterParam = "after"
)

// Page is the page a list request asks for. K is the list's sort key, which the cursor
// encodes: a book id, an email's (created_at, id).
type Page[K any] struct {
	Limit int // 1 to MaxPageLimit
	After *K  // nil: the first page; otherwise the key of the previous page's last item
}

// Fetch is how many items to read: one more than the page holds, so that NextPage can
// tell whether another page follows without a second query.
func (p Page[K]) Fetch() int { return p.Limit + 1 }

// CursorKey is a sort key that knows its own values: Known reports whether the key is one
// the list could have written (not a zero time, a nil id, an unknown kind). ParsePage
// refuses a cursor whose key is not as malformed.
type CursorKey interface {
	Known() bool
}

// ParsePage reads the query parameters limit (default DefaultPageLimit, 1 to
// MaxPageLimit, a plain decimal) and after (a cursor from a next link) of a list request,
// or returns a 400 problem naming the parameter at fault. Each may be given at most once.
func ParsePage[K any](r *http.Request) (Page[K], *Problem) {
	q := r.URL.Query()
	page := Page[K]{Limit: DefaultPageLimit}
	if values, ok := q[LimitParam]; ok {
		n, err := strconv.Atoi(values[0])
		// Only the canonical decimal form: no sign, no leading zeros, no spaces.
		if len(values) > 1 || err != nil || strconv.Itoa(n) != values[0] || n < 1 || n > MaxPageLimit {
			return Page[K]{}, pageProblem(LimitParam, fmt.Sprintf("must be given once, as a whole number from 1 to %d", MaxPageLimit))
		}
		page.Limit = n
	}
	if values, ok := q[AfterParam]; ok {
		var key K
		if len(values) > 1 || decodeCursor(values[0], &key) != nil {
			return Page[K]{}, pageProblem(AfterParam, "must be given once, as the cursor of a next link")
		}
		page.After = &key
	}
	return page, nil
}

// NextPage returns the items of the page out of rows, read with p.Fetch(), and when rows
// holds more than the page sets the Link header of w to the next page: the request's own
// path and query with after set to the cursor of the page's last item (key gives an
// item's sort key). Call it before writing the body; without a further page it sets no
// header.
func NextPage[T, K any](w http.ResponseWriter, r *http.Request, p Page[K], rows []T, key func(T) K) []T {
	if len(rows) <= p.Limit {
		return rows
	}
	rows = rows[:p.Limit]
	cursor, err := encodeCursor(key(rows[len(rows)-1]))
	if err != nil {
		// A sort key that cannot be marshalled is a programming error; a page without a
		// next link would be the silent cut this is here to prevent.
		panic(fmt.Sprintf("httpapi: cursor of %T: %v", key(rows[len(rows)-1]), err))
	}
	q := r.URL.Query()
	q.Set(AfterParam, cursor)
	next := url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: q.Encode()}
	w.Header().Add("Link", "<"+next.String()+`>; rel="next"`)
	return rows
}

// NextLink returns the target of the rel="next" link among the Link headers of a
// response, as written (relative to the request's URL), or "" when there is none: the
// last page. A client resolves it with resp.Request.URL.Parse.
func NextLink(h http.Header) string {
	for _, value := range h.Values("Link") {
		for _, link := range strings.Split(value, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(link), ";")
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, param := range strings.Split(params, ";") {
				name, val, _ := strings.Cut(strings.TrimSpace(param), "=")
				if strings.EqualFold(name, "rel") && linkRelHas(strings.Trim(val, `"`), "next") {
					return target[1 : len(target)-1]
				}
			}
		}
	}
	return ""
}

// NextPageURL resolves the next link of a page read from current: the next page's URL, or
// nil after the last page.
func NextPageURL(current *url.URL, h http.Header) (*url.URL, error) {
	link := NextLink(h)
	if link == "" {
		return nil, nil
	}
	next, err := current.Parse(link)
	if err != nil {
		return nil, fmt.Errorf("next link %q: %w", link, err)
	}
	return next, nil
}

func linkRelHas(rels, rel string) bool {
	for _, r := range strings.Fields(rels) {
		if strings.EqualFold(r, rel) {
			return true
		}
	}
	return false
}

// encodeCursor is base64url (unpadded) of the key's JSON: opaque to clients, which must
// not build or edit one, and safe in a query string as it is.
func encodeCursor(key any) (string, error) {
	b, err := json.Marshal(key)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// decodeCursor reads a cursor strictly: only what encodeCursor writes for a key of the
// key's type (unpadded base64url of its JSON, byte for byte: no null, no other spelling
// of the same key, nothing after it), valid by the key's own rule if it has one.
func decodeCursor(cursor string, key any) error {
	b, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(key); err != nil {
		return err
	}
	if again, err := encodeCursor(key); err != nil || again != cursor {
		return errors.New("not a cursor this list writes")
	}
	if k, ok := key.(CursorKey); ok && !k.Known() {
		return errors.New("not a cursor this list writes")
	}
	return nil
}

func pageProblem(name, detail string) *Problem {
	p := NewProblem(http.StatusBadRequest, "malformed", "Malformed request", name+": "+detail)
	p.Errors = []FieldError{{Field: name, Detail: detail}}
	return p
}
