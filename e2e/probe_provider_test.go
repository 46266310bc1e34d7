package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// The second security review's probes of the email provider and the address rule (issue
// 26, findings 2 and 7), against the running system: the provider answers only callers
// with an API key, an Idempotency-Key belongs to its account so a stranger cannot take a
// customer's first, and a look-alike or loopback address is refused wherever one enters.
func TestTheProviderKnowsItsCallersAndAStrangerCannotTakeAnOrdersEmail(t *testing.T) {
	t.Parallel()
	const strangerKey = "e2e-stranger-key-0123456789abcdef0123"
	s := startSystem(t, map[string]map[string]string{
		"emailprovider": {"EMAILPROVIDER_API_KEYS": "bookstore:" + notificationKey + ":send,read,bookstore:" + readerKey + ":send,read,admin,stranger:" + strangerKey},
	})
	s.setStock(bookID(1), "Dune", 10)

	email := func(to string) string {
		return `{"to":"` + to + `","subject":"Your order is confirmed","text":"Pay here"}`
	}
	for _, p := range []probe{
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: []string{"Idempotency-Key", "k", "Authorization", ""}, body: email("eve@example.com"), status: 401},
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: []string{"Idempotency-Key", "k", "Authorization", "Bearer not-a-key-0123456789abcdef0123456789"}, body: email("eve@example.com"), status: 401},
		{service: "emailprovider", method: "GET", path: "/v1/emails/k", header: []string{"Authorization", "Basic " + readerKey}, status: 401},
		{service: "emailprovider", method: "GET", path: "/v1/emails?to=ada@example.com", header: []string{"Authorization", ""}, status: 401},
		{service: "emailprovider", method: "GET", path: "/admin/faults", header: []string{"Authorization", ""}, status: 401},
		// The provider's own rule, a third party's: no one-label domain, no numeric
		// address, no formatting character. Ordering's is stricter (below).
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: []string{"Idempotency-Key", "k2"}, body: email("ada@localhost"), status: 422, names: "to"},
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: []string{"Idempotency-Key", "k3"}, body: email("ada@127.0.0.1"), status: 422, names: "to"},
		{service: "emailprovider", method: "POST", path: "/v1/emails", header: []string{"Idempotency-Key", "k4"}, body: email("ada\u202e@example.com"), status: 422, names: "to"},
	} {
		status, problem, raw := send(t, s.URL[p.service], p)
		if status != p.status || problem == nil || (p.names != "" && !strings.Contains(raw, p.names)) {
			t.Errorf("%s %s %q: %d %s, want %d problem+json naming %q", p.method, p.path, p.header, status, raw, p.status, p.names)
		}
	}
	// Ordering's rule refuses look-alike, full-width and loopback-resolving names too.
	for i, address := range []string{"ada@ex\u0430mple.com", "\uff41da@example.com", "ada@localhost.localdomain", "ada@127.0.0.1.nip.io", "ada@example.test"} {
		p := probe{service: "ordering", method: "POST", path: "/orders", header: []string{"Idempotency-Key", fmt.Sprintf("address-%d", i)},
			body: `{"customer_email":"` + address + `","lines":[{"book_id":"` + bookID(1) + `","quantity":1}]}`, status: 422, names: "customer_email"}
		if status, problem, raw := send(t, s.URL["ordering"], p); status != 422 || problem == nil || !strings.Contains(raw, "customer_email") {
			t.Errorf("an order for %q: %d %s, want 422 naming customer_email", address, status, raw)
		}
	}

	// A stranger with a key of its own sends under the order's predictable key as soon as
	// the order exists: its email is its own account's, and the customer's goes out all
	// the same, under the same key, to the customer.
	o := s.placeOrder("ada@example.com", line{BookID: bookID(1), Quantity: 1})
	key := "order/" + o.ID + "/order-confirmed"
	squat := probe{method: "POST", path: "/v1/emails", header: []string{"Idempotency-Key", key, "Authorization", "Bearer " + strangerKey}, body: email("eve@example.com")}
	if status, _, raw := send(t, s.URL["emailprovider"], squat); status != http.StatusAccepted {
		t.Fatalf("the stranger's send: %d %s", status, raw)
	}
	n, emails := s.emailed(o.ID, "ada@example.com")
	if n.Status != "completed" || len(emails) != 1 || emails[0].IdempotencyKey != key || emails[0].Deliveries != 1 {
		t.Fatalf("record %+v and emails to ada %+v, want one email to ada under %s", n, emails, key)
	}
	if eve := s.emailsTo("eve@example.com"); len(eve) != 0 {
		t.Fatalf("bookstore's account holds the stranger's email: %+v", eve)
	}
}
