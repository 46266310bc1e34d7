package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// The tests of this package start the real inventory service, in-process through run()
// or as a real process where it has to die, against the real Postgres and RabbitMQ, each
// test in a database and a virtual host of its own.

var dune = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")

// outcomesQueue is a queue the tests bind to every inventory event, to count what
// inventory announced: the contracts' queues are consumed by ordering and notification.
const outcomesQueue = "test.inventory-outcomes"

// sut is the system under test, as testenv's helpers see it.
var sut = testenv.System{
	Topology:  contracts.Topology,
	Contracts: apitest.Checker{}, // every request, response and event against api/
}

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// env is one inventory instance's configuration: its own database and vhost.
type env struct {
	adminURL, databaseURL, amqpURL string
}

// newEnv makes the database and vhost, declares the contracts' topology in the vhost and
// binds outcomesQueue, so nothing inventory publishes is lost before the test reads it.
func newEnv(t *testing.T) env {
	t.Helper()
	admin, db := testenv.Database(t, "inventory")
	e := env{adminURL: admin, databaseURL: db, amqpURL: testenv.VHost(t)}
	ch := sut.Channel(t, e.amqpURL)
	if _, err := ch.QueueDeclare(outcomesQueue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(outcomesQueue, "inventory.#", contracts.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// vars is the service's environment; extra adds name, value pairs.
func (e env) vars(extra ...string) map[string]string {
	m := map[string]string{
		"DATABASE_URL":         e.databaseURL,
		"DATABASE_ADMIN_URL":   e.adminURL,
		"AMQP_URL":             e.amqpURL,
		"LOG_LEVEL":            "warn",
		"CONSUMER_CONCURRENCY": "2",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// startInProcess runs the service through run() until the test ends and returns its
// base URL once /readyz answers 200.
func startInProcess(t *testing.T, e env, extra ...string) string {
	t.Helper()
	return sut.StartInProcess(t, run, e.vars(extra...))
}

// startProcess runs the built inventory command as a real OS process, for the tests
// that kill it.
func startProcess(t *testing.T, e env, extra ...string) *testenv.Process {
	t.Helper()
	return sut.StartProcess(t, testenv.Build(t, "."), nil, e.vars(extra...))
}

// orderPlaced is the OrderPlaced event of a new order, as ordering's outbox writes it.
func orderPlaced(t *testing.T, lines ...contracts.Line) event.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	env, err := event.New("bookstore/ordering", contracts.OrderPlaced, id.String(), 1, contracts.OrderPlacedData{
		OrderID: id, CustomerEmail: "ada@example.com", Lines: lines, PlacedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// publish sends body to the events exchange under routingKey, as ordering's relay does,
// and waits for the broker's confirm (publishing again what it nacks).
func publish(t *testing.T, amqpURL, routingKey, messageID string, body []byte) {
	t.Helper()
	sut.Publish(t, amqpURL, broker.Message{RoutingKey: routingKey, Publishing: amqp.Publishing{
		MessageId: messageID, Type: routingKey, ContentType: event.ContentType, AppId: "ordering", Body: body,
	}})
}

func publishEvent(t *testing.T, amqpURL string, env event.Envelope) {
	t.Helper()
	publish(t, amqpURL, env.Type, env.ID, marshal(t, env))
}

// publishPoison is publish for a message malformed on purpose: it is not checked against
// the contracts (api/asyncapi.yaml) as every other message a test publishes is.
func publishPoison(t *testing.T, amqpURL, routingKey, messageID string, body []byte) {
	t.Helper()
	sut.PublishPoison(t, amqpURL, broker.Message{RoutingKey: routingKey, Publishing: amqp.Publishing{
		MessageId: messageID, Type: routingKey, ContentType: event.ContentType, AppId: "ordering", Body: body,
	}})
}

// distinctIDs counts the distinct message ids of msgs: a relay may publish an event twice
// after a crash, always with the same id.
func distinctIDs(msgs []amqp.Delivery) map[string]amqp.Delivery {
	out := map[string]amqp.Delivery{}
	for _, m := range msgs {
		out[m.MessageId] = m
	}
	return out
}

func reserved(t *testing.T, db *pgxpool.Pool, book uuid.UUID) int {
	t.Helper()
	return testenv.Count(t, db, "SELECT reserved FROM book_stock WHERE id = $1", book)
}

func request(t *testing.T, method, url, body string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" || method == http.MethodPut || method == http.MethodPost {
		// A PUT's body is JSON even when a test leaves it empty: the router answers a body
		// not declared application/json with 415 before the handler reads it.
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}
