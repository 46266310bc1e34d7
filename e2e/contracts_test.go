package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.yaml.in/yaml/v4"

	apidocs "github.com/bookstore-go/bookstore/api"
	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// TestEveryEventOfARealFlowMatchesItsSchema captures every event the running system
// publishes while orders are confirmed and rejected, with ordering on v1 and then on v2,
// and checks each with the CloudEvents Go SDK and against api/schemas (envelope and data
// of its type and version). The HTTP traffic of the flow is checked against
// api/openapi by testenv (every request of call, every answer).
func TestEveryEventOfARealFlowMatchesItsSchema(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)

	// A queue of the test's own, bound to every routing key, sees a copy of every event.
	ch := sut.Channel(t, s.AMQPURL)
	capture := testenv.Name("e2e.capture")
	if _, err := ch.QueueDeclare(capture, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(capture, "#", contracts.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}

	dune := bookID(1)
	s.setStock(dune, "Dune", 10)
	settle := func(email string, qty int, want string) {
		t.Helper()
		o := s.placeOrder(email, line{dune, qty})
		if got := s.settled(o.ID, 30*time.Second); got.Status != want {
			t.Fatalf("order %s is %s, want %s", o.ID, got.Status, want)
		}
	}
	settle("confirmed@example.com", 1, "confirmed")
	settle("rejected@example.com", 50, "rejected")
	v2 := sut.StartProcess(t, testenv.Build(t, "github.com/bookstore-go/bookstore/services/ordering/cmd/ordering"), nil, map[string]string{
		"DATABASE_URL": s.DB["ordering"], "DATABASE_ADMIN_URL": testenv.AdminURL(), "AMQP_URL": s.AMQPURL,
		"LOG_LEVEL": "info", "ORDERING_ORDER_PLACED_VERSION": "2",
	})
	s.procs["ordering"].Stop(t)
	s.URL["ordering"] = v2.Base
	settle("v2@example.com", 1, "confirmed")

	want := []string{contracts.OrderPlaced, contracts.OrderPlacedV2, contracts.StockReserved, contracts.StockRejected}
	seen := map[string]int{}
	testenv.Eventually(t, 20*time.Second, "every event type captured", func() bool {
		for {
			d, ok, err := ch.Get(capture, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			sut.CheckDelivery(t, d)
			if d.AppId == "" || d.DeliveryMode != amqp.Persistent {
				t.Errorf("event %s: app_id %q, delivery_mode %d", d.MessageId, d.AppId, d.DeliveryMode)
			}
			seen[d.Type]++
		}
		return len(seen) == len(want)
	})
	for _, typ := range want {
		if seen[typ] == 0 {
			t.Errorf("no %s captured (seen %v)", typ, seen)
		}
	}
}

// TestEachServiceServesItsDocument: GET /openapi.yaml of each service is its document in
// api/openapi, byte for byte, as application/yaml.
func TestEachServiceServesItsDocument(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	for _, name := range apidocs.Services {
		resp, err := http.Get(s.URL[name] + "/openapi.yaml")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(b, apidocs.OpenAPI(name)) {
			t.Errorf("%s: GET /openapi.yaml: %d %s, %d bytes; want 200 application/yaml, api/openapi/%s.yaml (%d bytes)",
				name, resp.StatusCode, resp.Header.Get("Content-Type"), len(b), name, len(apidocs.OpenAPI(name)))
		}
	}
}

// TestContractsMatchTheDocuments holds the Go names of the contracts to the AsyncAPI
// document and the schemas, with no system running: every event type has its schema and
// its channel, every queue its bindings, and the data types of package contracts, as
// encoding/json writes them, match their schemas (a renamed JSON field fails here).
func TestContractsMatchTheDocuments(t *testing.T) {
	var doc struct {
		Channels map[string]struct {
			Address  string `yaml:"address"`
			Bindings struct {
				AMQP struct {
					Is string `yaml:"is"`
				} `yaml:"amqp"`
			} `yaml:"bindings"`
			QueueBindings []string `yaml:"x-bookstore-bindings"`
		} `yaml:"channels"`
	}
	if err := yaml.Unmarshal(apidocs.AsyncAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	types := []string{contracts.OrderPlaced, contracts.OrderPlacedV2, contracts.StockReserved, contracts.StockRejected}
	queues := map[string][]string{}
	var addresses []string
	for _, c := range doc.Channels {
		addresses = append(addresses, c.Address)
		if c.Bindings.AMQP.Is == "queue" {
			queues[c.Address] = slices.Sorted(slices.Values(c.QueueBindings))
		}
	}
	for _, typ := range types {
		if !apitest.HasSchema(typ) || !slices.Contains(addresses, typ) {
			t.Errorf("%s: no schema in api/schemas or no channel in api/asyncapi.yaml", typ)
		}
	}
	for _, q := range contracts.Topology.Queues {
		if got, want := queues[q.Name], slices.Sorted(slices.Values(q.Bindings)); !slices.Equal(got, want) {
			t.Errorf("queue %s: asyncapi.yaml binds %v, contracts.Topology %v", q.Name, got, want)
		}
		delete(queues, q.Name)
	}
	if len(queues) > 0 {
		t.Errorf("asyncapi.yaml has queues contracts.Topology does not: %v", queues)
	}

	order, book := uuid.New(), uuid.New()
	lines := []contracts.Line{{BookID: book, Quantity: 2}}
	placed := time.Now().UTC()
	samples := map[string]struct {
		source string
		data   any
	}{
		contracts.OrderPlaced:   {contracts.OrderingSource, contracts.OrderPlacedData{OrderID: order, CustomerEmail: "ada@example.com", Lines: lines, PlacedAt: placed}},
		contracts.OrderPlacedV2: {contracts.OrderingSource, contracts.OrderPlacedV2Data{OrderID: order, Customer: contracts.Customer{Email: "ada@example.com", Name: "Ada"}, Lines: lines, PlacedAt: placed}},
		contracts.StockReserved: {contracts.InventorySource, contracts.StockReservedData{OrderID: order, CustomerEmail: "ada@example.com", Lines: lines}},
		contracts.StockRejected: {contracts.InventorySource, contracts.StockRejectedData{OrderID: order, CustomerEmail: "ada@example.com", Lines: lines, Reason: "insufficient stock"}},
	}
	names := make([]string, 0, len(samples))
	for typ := range samples {
		names = append(names, typ)
	}
	sort.Strings(names)
	for _, typ := range names {
		sample := samples[typ]
		env, err := event.New(sample.source, typ, order.String(), 1, sample.data)
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := apitest.ValidateEvent(body); err != nil {
			t.Errorf("%s as package contracts writes it: %v", typ, err)
		}
	}
}
