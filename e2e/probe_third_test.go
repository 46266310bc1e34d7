package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// The third security review's probes, against the running system: each caller may do
// what its role needs and no more, events are taken only from their producer, and what a
// client sends bounds its connections, log lines and answers.

// The storefront's key at the provider reads each order's email and nothing more: it
// cannot send to a recipient of its choosing, nor send first under an order's
// predictable key to make the customer's own email fail, nor change the faults.
func TestTheStorefrontsKeyMayReadButNotSend(t *testing.T) {
	t.Parallel()
	const storefrontKey = "e2e-storefront-key-0123456789abcdef012"
	s := startSystem(t, map[string]map[string]string{
		"emailprovider": {
			"EMAILPROVIDER_ADMIN":    "1",
			"EMAILPROVIDER_API_KEYS": "bookstore:" + notificationKey + ":send,read,bookstore:" + readerKey + ":send,read,admin,bookstore:" + storefrontKey + ":read",
		},
	})
	s.setStock(bookID(1), "Dune", 10)
	o := s.placeOrder("ada@example.com", line{BookID: bookID(1), Quantity: 1})
	n, _ := s.emailed(o.ID, "ada@example.com")
	if n.Status != "completed" {
		t.Fatalf("order %s's confirmation: %+v", o.ID, n)
	}

	as := []string{"Authorization", "Bearer " + storefrontKey}
	for _, p := range []probe{
		{method: "POST", path: "/v1/emails", header: append([]string{"Idempotency-Key", "order/" + o.ID + "/order-cancelled"}, as...),
			body: `{"to":"forged.recipient@example.org","subject":"Your order","text":"Pay here"}`, status: 403, names: "send"},
		{method: "PUT", path: "/admin/faults", header: as, body: `{"fail_rate":1,"ambiguous_rate":0,"latency":"0s"}`, status: 403, names: "admin"},
	} {
		status, problem, raw := send(t, s.URL["emailprovider"], p)
		if status != p.status || problem == nil || !strings.HasSuffix(problem.Type, "#forbidden") || !strings.Contains(problem.Detail, p.names) {
			t.Errorf("the storefront's key: %s %s: %d %s, want 403 forbidden naming %s", p.method, p.path, status, raw, p.names)
		}
	}
	for _, path := range []string{"/v1/emails/order/" + o.ID + "/order-confirmed", "/v1/emails?to=ada@example.com", "/admin/faults"} {
		if status, _, raw := send(t, s.URL["emailprovider"], probe{method: "GET", path: path, header: as}); status != http.StatusOK {
			t.Errorf("the storefront's key reads %s: %d %s, want 200", path, status, raw)
		}
	}
	if forged := s.emailsTo("forged.recipient@example.org"); len(forged) != 0 {
		t.Errorf("the storefront's key sent: %+v", forged)
	}
}

// A stock event for an order ordering never placed, published on bookstore.events by a
// broker user that is not inventory's (an administrator's login, another service's user),
// reaches ordering's and notification's queues and is dead-lettered by both, unread:
// no record, no email to the recipient it names, whose reason text would have been the
// email's body.
func TestAStockEventFromAnyoneButInventoryIsDeadLetteredAndEmailsNobody(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	stranger := testenv.BrokerUser(t, s.AMQPURL)
	order := uuid.Must(uuid.NewV7())
	env, err := event.New(contracts.InventorySource, contracts.StockRejected, order.String(), 1, contracts.StockRejectedData{
		OrderID: order, CustomerEmail: "forged.recipient@example.org", Reason: "verify your account at https://example.org/phish",
		Lines: []contracts.Line{{BookID: uuid.MustParse(bookID(1)), Quantity: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(env)
	sut.Publish(t, stranger, broker.Message{RoutingKey: env.Type, Publishing: broker.EventPublishing(env.ID, env.Type, "inventory", env.Time, body)})

	for _, c := range []struct{ service, queue string }{
		{"ordering", contracts.QueueOrderingStockEvents}, {"notification", contracts.QueueNotificationStockEvents},
	} {
		dlq := broker.Queue{Name: c.queue}.DLQ()
		testenv.Eventually(t, 30*time.Second, "the forged event in "+dlq, func() bool { return testenv.QueueDepth(t, s.AMQPURL, dlq) == 1 })
		if got := testenv.Metric(t, s.URL[c.service], "bookstore_consumer_poison_total", `queue="`+c.queue+`"`, `reason="producer"`); got != 1 {
			t.Errorf("%s's poison{reason=producer} = %v, want 1", c.service, got)
		}
	}
	if got := s.notifications(order.String()); len(got) != 0 {
		t.Errorf("notification made %d records of the forged event: %+v", len(got), got)
	}
	if got := s.emailsTo("forged.recipient@example.org"); len(got) != 0 {
		t.Errorf("the forged event was emailed: %+v", got)
	}
}
