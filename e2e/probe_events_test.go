package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// The events the second security review published straight into the broker, as anyone
// holding a broker user could: each is dead-lettered by inventory at its first delivery,
// counted by queue and reason, and goes no further (no outcome event
// for ordering or notification), no log line it causes is longer than a few KB, and the
// orders behind them are served as usual.
func TestEveryMalformedEventIsDeadLetteredUnreadAndGoesNoFurther(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	const dune = "018f2b1e-0000-7000-8000-000000000001"
	s.setStock(dune, "Dune", 10)

	placed := func(email string) (event.Envelope, []byte) {
		id := uuid.Must(uuid.NewV7())
		env, err := event.New(contracts.OrderingSource, contracts.OrderPlaced, id.String(), 1, contracts.OrderPlacedData{
			OrderID: id, CustomerEmail: email, Lines: []contracts.Line{{BookID: uuid.MustParse(dune), Quantity: 1}}, PlacedAt: time.Now().UTC(),
		})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(env)
		return env, b
	}
	msg := func(env event.Envelope, body []byte, contentType string) broker.Message {
		return broker.Message{RoutingKey: contracts.OrderPlaced, Publishing: amqp.Publishing{
			MessageId: env.ID, Type: contracts.OrderPlaced, ContentType: contentType, AppId: "ordering", Body: body}}
	}
	huge, hugeBody := placed(strings.Repeat("a", consumer.DefaultMaxMessageSize) + "@example.com")
	plain, plainBody := placed("ada@example.com")
	local, localBody := placed("ada@localhost")
	typed, typedBody := placed("ada@example.com")
	var withType map[string]any
	_ = json.Unmarshal(typedBody, &withType)
	withType["type"] = strings.Repeat("t", 30_000)
	typedBody, _ = json.Marshal(withType)
	reasons := map[string]string{
		huge.ID: event.ReasonTooLarge, plain.ID: event.ReasonContentType,
		local.ID: event.ReasonInvalidData, typed.ID: event.ReasonUnknownType,
	}
	sut.PublishPoison(t, s.AMQPURL,
		msg(huge, hugeBody, event.ContentType), msg(plain, plainBody, "text/plain"),
		msg(local, localBody, event.ContentType), msg(typed, typedBody, event.ContentType))

	dlq := contracts.Topology.Queues[0].DLQ()
	for _, q := range contracts.Topology.Queues {
		if q.Name == "inventory.order-placed" {
			dlq = q.DLQ()
		}
	}
	testenv.Eventually(t, 30*time.Second, "the four events in "+dlq, func() bool { return testenv.QueueDepth(t, s.AMQPURL, dlq) == len(reasons) })
	// The system still serves orders; its outcome is behind the poison in the queue.
	o := s.placeOrder("ada@example.com", line{BookID: dune, Quantity: 1})
	if got := s.settled(o.ID, 30*time.Second); got.Status != "confirmed" {
		t.Errorf("the order after the poison: %s, want confirmed", got.Status)
	}
	// A DLQ copy's x-delivery-count does not tell whether its message was requeued before
	// it was rejected: 0 on RabbitMQ 3.10 and 1 on 4.0 either way
	// (TestADeadLetteredCopyTellsItsQueuesDeliveriesOnlyOnRabbitMQ43). That poison
	// goes at its first delivery is the consumer's tests' to show, by its redeliveries.
	for _, d := range sut.Drain(t, s.AMQPURL, dlq, 100*time.Millisecond) {
		if _, ok := reasons[d.MessageId]; !ok {
			t.Errorf("%s dead-lettered: not one of the probes", d.MessageId)
		}
	}
	count := map[string]int{}
	for _, r := range reasons {
		count[r]++
	}
	for reason, n := range count {
		if got := testenv.Metric(t, s.URL["inventory"], "bookstore_consumer_poison_total", `queue="inventory.order-placed"`, `reason="`+reason+`"`); got != float64(n) {
			t.Errorf("inventory's poison{reason=%s} = %v, want %d", reason, got, n)
		}
	}
	// None of them reached ordering or notification as an outcome: only the real order's.
	if got := s.notifications(huge.Subject); len(got) != 0 {
		t.Errorf("notification has %d records of the 64 KiB order", len(got))
	}
	if got := s.notifications(local.Subject); len(got) != 0 {
		t.Errorf("notification has %d records of the order to ada@localhost", len(got))
	}
	for _, name := range services {
		sc := bufio.NewScanner(strings.NewReader(s.logs(name)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if n := len(sc.Text()); n > 4096 {
				t.Errorf("%s logged a line of %d bytes: %.200s…", name, n, sc.Text())
			}
		}
	}
}

// The storefront in front of the running system: every
// answer carries a strict Content-Security-Policy, nosniff and no framing; a service
// that is down is named by what failed, not by its internal URL; a pid that is not the
// relay is refused without its command line; /static/ lists nothing; 404s are problems.
func TestTheStorefrontDefendsItsPagesAndNamesNothingInside(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	down := testenv.FreeAddr(t) // no one listens: inventory, as the storefront sees it, is down
	sf := sut.StartProcess(t, testenv.Build(t, "github.com/bookstore-go/bookstore/services/storefront/cmd/storefront"), nil, map[string]string{
		"ORDERING_URL": s.URL["ordering"], "INVENTORY_URL": "http://" + down, "NOTIFICATION_URL": s.URL["notification"],
		"EMAILPROVIDER_URL": s.URL["emailprovider"], "STOREFRONT_DEMOS": "1", "STOREFRONT_RELAY_PID": strconv.Itoa(os.Getpid()),
	})
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get(sf.Base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return resp, b.String()
	}
	for _, path := range []string{"/", "/static/app.js", "/api/books", "/static/", "/nowhere"} {
		resp, body := get(path)
		h := resp.Header
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: X-Content-Type-Options %q, X-Frame-Options %q", path, h.Get("X-Content-Type-Options"), h.Get("X-Frame-Options"))
		}
		if strings.Contains(body, down) {
			t.Errorf("GET %s names inventory's internal address %s", path, down)
		}
		if path == "/static/" || path == "/nowhere" {
			if resp.StatusCode != http.StatusNotFound || h.Get("Content-Type") != "application/problem+json" || strings.Contains(body, "app.js") {
				t.Errorf("GET %s: %d %s %.100s, want a 404 problem listing nothing", path, resp.StatusCode, h.Get("Content-Type"), body)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodPost, sf.Base+"/api/demos/relay/pause", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || strings.Contains(b.String(), "-test.") || strings.Contains(b.String(), os.Args[0]) {
		t.Errorf("POST /api/demos/relay/pause with a pid not the relay's: %d %s, want 409 naming no process", resp.StatusCode, b.String())
	}
}
