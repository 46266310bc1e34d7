package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv"
)

// GET /notifications?order_id= a page at a time: an order has at most two records today,
// and the list is bounded all the same, as every list of the contracts is.

func TestListingAnOrdersRecordsWalksThemOnceInKindOrderByNextLinks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	n := w.startNotification(t)
	order, other := uuid.New(), uuid.New()
	db := testenv.Pool(t, w.notification)
	if _, err := db.Exec(context.Background(), `
		INSERT INTO notifications (order_id, kind, idempotency_key, recipient, subject, body, event_id)
		SELECT o, k, 'order/' || o || '/' || k, 'ada@example.com', 's', 'b', gen_random_uuid()
		FROM unnest(ARRAY[$1::uuid, $2::uuid]) AS o, unnest(ARRAY['order-rejected', 'order-confirmed']) AS k`, order, other); err != nil {
		t.Fatal(err)
	}

	var kinds []string
	var links []string
	u := n.Base + "/notifications?limit=1&order_id=" + order.String()
	for u != "" && len(kinds) < 5 {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var page []record
		decode(t, resp, &page)
		if resp.StatusCode != http.StatusOK || len(page) != 1 {
			t.Fatalf("GET %s: %d, %d records; want 200 and 1", u, resp.StatusCode, len(page))
		}
		if page[0].OrderID != order {
			t.Errorf("a record of order %s in the list of %s", page[0].OrderID, order)
		}
		kinds = append(kinds, page[0].Kind)
		next := httpapi.NextLink(resp.Header)
		links = append(links, next)
		u = ""
		if next != "" {
			u = n.Base + next
		}
	}
	if strings.Join(kinds, ",") != "order-confirmed,order-rejected" {
		t.Errorf("walked %v, want order-confirmed then order-rejected, each once", kinds)
	}
	if len(links) != 2 || !strings.HasPrefix(links[0], "/notifications?") || !strings.Contains(links[0], "order_id="+order.String()) || links[1] != "" {
		t.Errorf("next links %q: want one to /notifications keeping order_id, and none on the last page", links)
	}
	if got := records(t, n, order); len(got) != 2 {
		t.Errorf("the whole list holds %d records, want 2", len(got))
	}

	for query, field := range map[string]string{
		"limit=0": "limit", "limit=-1": "limit", "limit=abc": "limit", "limit=1001": "limit",
		"after=garbage": "after", "after=" + url.QueryEscape("InNlbnQi"): "after", // "sent": not a kind
	} {
		resp, err := http.Get(n.Base + "/notifications?order_id=" + order.String() + "&" + query)
		if err != nil {
			t.Fatal(err)
		}
		var p httpapi.Problem
		decode(t, resp, &p)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
			p.Type != httpapi.ProblemType+"malformed" || len(p.Errors) != 1 || p.Errors[0].Field != field {
			t.Errorf("?%s: %d %+v, want a 400 malformed problem naming %s", query, resp.StatusCode, p, field)
		}
	}
}

func decode(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode: %v", err)
	}
}
