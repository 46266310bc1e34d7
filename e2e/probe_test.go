package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// probe is one malformed request and the 4xx it must get.
type probe struct {
	service, method, path string
	contentType           string // "" : application/json
	header                []string
	body                  string
	status                int
	names                 string // what the problem must name, in a field error or its detail; "" : only a detail
}

// The inputs a security review sent, at every endpoint of the running
// system: each is a 4xx problem+json that says what is wrong, none a 500, and none
// changes anything.
func TestEveryMalformedRequestGetsAProblemAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := startSystem(t, map[string]map[string]string{
		"inventory":     {"INVENTORY_ADMIN": "1"},
		"emailprovider": {"EMAILPROVIDER_ADMIN": "1"},
	})
	const (
		dune    = "018f2b1e-0000-7000-8000-000000000001"
		unknown = "018f2b1e-0000-7000-8000-00000000dead"
	)
	line := `"lines":[{"book_id":"` + dune + `","quantity":1}]`
	order := func(email string) string { return `{"customer_email":"` + email + `",` + line + `}` }
	email := func(to, subject string) string {
		return `{"to":"` + to + `","subject":"` + subject + `","text":"t"}`
	}
	key := []string{"Idempotency-Key", "probe"} // made "probe-<n>" per probe below, so none answers for another
	probes := []probe{
		// Routing, on every service.
		{service: "ordering", method: "GET", path: "/nowhere", status: 404},
		{service: "inventory", method: "GET", path: "/nowhere", status: 404},
		{service: "notification", method: "GET", path: "/nowhere", status: 404},
		{service: "emailprovider", method: "GET", path: "/nowhere", status: 404},
		{service: "ordering", method: "DELETE", path: "/orders/" + dune, status: 405, names: "GET"},
		{service: "ordering", method: "GET", path: "/orders", status: 405, names: "POST"},
		{service: "inventory", method: "POST", path: "/books", body: `{}`, status: 405, names: "GET"},
		{service: "notification", method: "POST", path: "/notifications", body: `{}`, status: 405, names: "GET"},
		{service: "emailprovider", method: "DELETE", path: "/v1/emails/k", status: 405, names: "GET"},
		{service: "ordering", method: "POST", path: "/healthz", body: `{}`, status: 405, names: "GET"},

		// POST /orders.
		{service: "ordering", method: "POST", path: "/orders", header: key, contentType: "text/plain", body: order("ada@example.com"), status: 415, names: "Content-Type"},
		{service: "ordering", method: "POST", path: "/orders", header: key, contentType: "multipart/form-data; boundary=x", body: order("ada@example.com"), status: 415, names: "Content-Type"},
		{service: "ordering", method: "POST", path: "/orders", header: key, contentType: "application/x-www-form-urlencoded", body: order("ada@example.com"), status: 415, names: "Content-Type"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: order(`a\u0000b@example.com`), status: 400, names: "customer_email"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: order("ada\xff@example.com"), status: 400, names: "UTF-8"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: order("ada@example.com") + " ]", status: 400, names: "after its JSON object"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: order("ada@example.com") + "}}}", status: 400, names: "after its JSON object"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: `{"customer_email":"a@example.com","customer_email":"b@example.com",` + line + `}`, status: 400, names: "customer_email"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: `{"Customer_Email":"ada@example.com",` + line + `}`, status: 400, names: "Customer_Email"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: `{"customer_email":"ada@example.com","lines":[{"book_id":"` + dune + `","quantity":"1"}]}`, status: 400, names: "lines[0].quantity"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: `null`, status: 400},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: ``, status: 400},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: order("a@localhost"), status: 422, names: "customer_email"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: order("a@[127.0.0.1]"), status: 422, names: "customer_email"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: order(`ada\u202e@example.com`), status: 422, names: "customer_email"},
		{service: "ordering", method: "POST", path: "/orders", header: key, body: `{"customer_email":"` + strings.Repeat("a", 70<<10) + `"}`, status: 413},
		{service: "ordering", method: "POST", path: "/orders", header: []string{"Idempotency-Key", "tab\tkey"}, body: order("ada@example.com"), status: 400, names: "Idempotency-Key"},
		{service: "ordering", method: "GET", path: "/orders/abc", status: 400, names: "id"},
		{service: "ordering", method: "GET", path: "/orders/abc%00def", status: 400, names: "id"},
		{service: "ordering", method: "GET", path: "/orders/" + unknown, status: 404},

		// The catalogue.
		{service: "inventory", method: "GET", path: "/books?limit=0", status: 400, names: "limit"},
		{service: "inventory", method: "GET", path: "/books?limit=1001", status: 400, names: "limit"},
		{service: "inventory", method: "GET", path: "/books?after=not-a-cursor", status: 400, names: "after"},
		{service: "inventory", method: "GET", path: "/books/%ff", status: 400, names: "id"},
		{service: "inventory", method: "GET", path: "/books/" + unknown, status: 404},
		{service: "inventory", method: "PUT", path: "/books/" + dune, contentType: "text/plain", body: `{"title":"Dune","on_hand":1}`, status: 415, names: "Content-Type"},
		{service: "inventory", method: "PUT", path: "/books/" + dune, body: `{"title":"Du\u0000ne","on_hand":1}`, status: 400, names: "title"},
		{service: "inventory", method: "PUT", path: "/books/" + dune, body: `{"title":"Dune","on_hand":-1}`, status: 422, names: "on_hand"},
		{service: "inventory", method: "PUT", path: "/books/" + dune, body: `{"title":"Dune","on_hand":1.5}`, status: 400, names: "on_hand"},
		{service: "inventory", method: "PUT", path: "/books/" + dune, body: `{"title":"Dune","on_hand":1} ]`, status: 400},
		{service: "inventory", method: "PUT", path: "/books/not-a-uuid", body: `{"title":"Dune","on_hand":1}`, status: 400, names: "id"},

		// Notification records.
		{service: "notification", method: "GET", path: "/notifications", status: 400, names: "order_id"},
		{service: "notification", method: "GET", path: "/notifications?order_id=%ff", status: 400, names: "order_id"},
		{service: "notification", method: "GET", path: "/notifications?order_id=abc", status: 400, names: "order_id"},
		{service: "notification", method: "GET", path: "/notifications?order_id=" + dune + "&limit=abc", status: 400, names: "limit"},

		// The email provider.
		{service: "emailprovider", method: "POST", path: "/v1/emails", body: email("ada@example.com", "s"), status: 400, names: "Idempotency-Key"},
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: key, contentType: "text/plain", body: email("ada@example.com", "s"), status: 415, names: "Content-Type"},
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: key, body: email("ada@example.com", `a\u0000b`), status: 400, names: "subject"},
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: key, body: email("a@localhost", "s"), status: 422, names: "to"},
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: key, body: email(`ada\u2066@example.com`, "s"), status: 422, names: "to"},
		{service: "emailprovider", method: "GET", path: "/v1/emails/abc%00def", status: 400},
		{service: "emailprovider", method: "GET", path: "/v1/emails?to=%ff", status: 400, names: "to"},
		{service: "emailprovider", method: "GET", path: "/v1/emails", status: 400, names: "to"},
		{service: "emailprovider", method: "GET", path: "/v1/emails?to=ada@example.com&limit=-1", status: 400, names: "limit"},
		{service: "emailprovider", method: "GET", path: "/v1/emails?to=ada@example.com&after=%00", status: 400, names: "after"},
		{service: "emailprovider", method: "PUT", path: "/admin/faults", body: `{"fail_rate":0,"ambiguous_rate":0,"latency":"59s"}`, status: 422, names: "latency"},
		{service: "emailprovider", method: "PUT", path: "/admin/faults", body: `{"fail_rate":"x"}`, status: 400, names: "fail_rate"},
		{service: "emailprovider", method: "PUT", path: "/admin/faults", contentType: "text/plain", body: `{"fail_rate":1}`, status: 415, names: "Content-Type"},
	}
	before := changes(t, s)
	for i, p := range probes {
		if len(p.header) == 2 && p.header[1] == "probe" {
			p.header = []string{"Idempotency-Key", fmt.Sprintf("probe-%d", i)}
		}
		status, problem, raw := send(t, s.URL[p.service], p)
		where := p.service + " " + p.method + " " + p.path
		if status != p.status {
			t.Errorf("%s: %d %s, want %d", where, status, raw, p.status)
			continue
		}
		if problem == nil {
			t.Errorf("%s: %d without a problem+json body: %s", where, status, raw)
			continue
		}
		if problem.Status != status || problem.Detail == "" || !strings.HasPrefix(problem.Type, "https://") {
			t.Errorf("%s: problem %s, want its status, a type URI and a detail", where, raw)
		}
		if p.names != "" && !strings.Contains(raw, p.names) {
			t.Errorf("%s: problem %s does not name %s", where, raw, p.names)
		}
	}
	if after := changes(t, s); after != before {
		t.Errorf("the probe changed the system: %+v before, %+v after", before, after)
	}
}

type problemBody struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func send(t *testing.T, base string, p probe) (int, *problemBody, string) {
	t.Helper()
	req, err := http.NewRequest(p.method, base+p.path, strings.NewReader(p.body))
	if err != nil {
		t.Fatalf("%s %s: %v", p.method, p.path, err)
	}
	req.Header.Set("Authorization", "Bearer "+readerKey) // the provider's, for its probes; a row may send another
	if p.body != "" || p.method == http.MethodPost || p.method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.contentType != "" {
		req.Header.Set("Content-Type", p.contentType)
	}
	for i := 0; i+1 < len(p.header); i += 2 {
		req.Header.Set(p.header[i], p.header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", p.method, p.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") != "application/problem+json" {
		return resp.StatusCode, nil, string(b)
	}
	var problem problemBody
	if err := json.Unmarshal(b, &problem); err != nil {
		return resp.StatusCode, nil, string(b)
	}
	return resp.StatusCode, &problem, string(b)
}

// state is what a request that was refused must not have changed.
type state struct{ orders, keys, books, stock, emails int64 }

func changes(t *testing.T, s *system) state {
	t.Helper()
	one := func(db, query string) int64 {
		conn, err := pgx.Connect(t.Context(), s.DB[db])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		var n int64
		if err := conn.QueryRow(t.Context(), query).Scan(&n); err != nil {
			t.Fatalf("%s: %s: %v", db, query, err)
		}
		return n
	}
	return state{
		orders: one("ordering", "SELECT count(*) FROM orders"),
		keys:   one("ordering", "SELECT count(*) FROM idempotency_keys"),
		books:  one("inventory", "SELECT count(*) FROM books"),
		stock:  one("inventory", "SELECT coalesce(sum(on_hand * 7 + length(title)), 0) FROM book_stock"),
		emails: one("emailprovider", "SELECT count(*) FROM emails"),
	}
}
