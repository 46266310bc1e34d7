package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv"
)

// GET /v1/emails?to= is read a page at a time, and the pages together hold every email,
// oldest first: a list cut at a fixed length would hide the rest without a word.
func TestListingEmailsWalksEveryEmailOnceOldestFirstByNextLinks(t *testing.T) {
	t.Parallel()
	p := start(t)
	const to = "ada+pages@example.com"
	// 25 emails to the address, three to each microsecond (so the id orders emails sent at
	// the same moment), and some to another address that must not show up.
	db := testenv.Pool(t, p.databaseURL)
	if _, err := db.Exec(context.Background(), `
		INSERT INTO emails (id, account, idempotency_key, request_hash, recipient, subject, body, deliveries, response_body, created_at)
		SELECT gen_random_uuid(), 'bookstore', r || '/' || i, '\x00', r, 'Email ' || i, 'text', 1, '\x7b7d',
		       timestamptz '2026-11-30 12:00:00+00' + (i / 3) * interval '1 second'
		FROM generate_series(1, 25) AS i, unnest(ARRAY[$1, 'grace@example.com']) AS r`, to); err != nil {
		t.Fatal(err)
	}
	var want []string
	rows, err := db.Query(context.Background(), "SELECT id::text FROM emails WHERE recipient = $1 ORDER BY created_at, id", to)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}

	got, sizes := p.listPages(t, "/v1/emails?to="+url.QueryEscape(to)+"&limit=4")
	ids := make([]string, len(got))
	for i, e := range got {
		ids[i] = e.ID
		if e.To != to {
			t.Errorf("email %s to %q in the list of %s", e.ID, e.To, to)
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("walked %d emails %v, want the %d of the database once each, oldest first %v", len(ids), ids, len(want), want)
	}
	if !slices.Equal(sizes, []int{4, 4, 4, 4, 4, 4, 1}) {
		t.Errorf("pages of %v, want six of 4 and a last of 1 (the last with no next link)", sizes)
	}

	r := p.must(t, http.MethodGet, "/v1/emails?to="+url.QueryEscape(to)+"&limit=4", "", "")
	if next := httpapi.NextLink(r.header); !strings.HasPrefix(next, "/v1/emails?") || !strings.Contains(next, "to="+url.QueryEscape(to)) || !strings.Contains(next, "limit=4") {
		t.Errorf("next link %q: want /v1/emails with to and limit kept", next)
	}
	r = p.must(t, http.MethodGet, "/v1/emails?to="+url.QueryEscape(to)+"&limit=25", "", "")
	if r.header.Get("Link") != "" {
		t.Errorf("a page that holds the whole list has Link %q, want none", r.header.Get("Link"))
	}
}

func TestListingEmailsRefusesABadLimitOrCursorWith400NamingIt(t *testing.T) {
	t.Parallel()
	p := start(t)
	for query, field := range map[string]string{
		"limit=0": "limit", "limit=-1": "limit", "limit=abc": "limit", "limit=1001": "limit",
		"after=garbage": "after", "after=e30": "after", // e30 is {} in base64url
	} {
		r := p.must(t, http.MethodGet, "/v1/emails?to=ada%40example.com&"+query, "", "")
		wantStatus(t, "?"+query, r, http.StatusBadRequest)
		var problem httpapi.Problem
		if err := json.Unmarshal(r.body, &problem); err != nil || r.header.Get("Content-Type") != "application/problem+json" ||
			problem.Type != httpapi.ProblemType+"malformed" || len(problem.Errors) != 1 || problem.Errors[0].Field != field {
			t.Errorf("?%s: %s, want a malformed problem naming %s", query, r.body, field)
		}
	}
}
