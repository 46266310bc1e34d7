package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv"
)

// The tests of this package run the real notification and emailprovider binaries as OS
// processes, each with its own database, against one fresh RabbitMQ vhost per test, and
// play inventory by publishing stock events into it. This file holds what they share.

// sut is the system under test, as testenv's helpers see it.
var sut = testenv.System{
	Topology:  contracts.Topology,
	Contracts: apitest.Checker{}, // every request, response and event against api/
}

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// world is one test's databases, vhost and addresses. The provider's address is fixed
// for the test, so it can be started late or restarted where notification expects it.
type world struct {
	amqpURL                         string
	notificationAdmin, notification string
	providerAdmin, provider         string
	providerAddr                    string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{amqpURL: testenv.VHost(t), providerAddr: testenv.FreeAddr(t)}
	w.notificationAdmin, w.notification = testenv.Database(t, "notification")
	w.providerAdmin, w.provider = testenv.Database(t, "emailprovider")
	return w
}

func (w *world) startProvider(t *testing.T, extra ...string) *testenv.Process {
	t.Helper()
	bin := testenv.Build(t, "github.com/bookstore-go/bookstore/services/emailprovider/cmd/emailprovider")
	return sut.StartProcess(t, bin, nil, withExtra(map[string]string{
		"HTTP_ADDR":          w.providerAddr,
		"LOG_LEVEL":          "debug", // its request log, a debug line, shows the trace it was called in
		"DATABASE_URL":       w.provider,
		"DATABASE_ADMIN_URL": w.providerAdmin,
		// notification's key, and the tests' own key in the same account to read and
		// arrange what the provider holds (as the storefront's does).
		"EMAILPROVIDER_API_KEYS": "bookstore:" + notificationKey + ":send,read,bookstore:" + providerKey + ":send,read,admin",
		// Its one caller is notification, whose trace it continues, as compose has it.
		"OTEL_TRUST_INCOMING": "1",
	}, extra))
}

func (w *world) startNotification(t *testing.T, extra ...string) *testenv.Process {
	t.Helper()
	return sut.StartProcess(t, testenv.Build(t, "."), nil, withExtra(map[string]string{
		"LOG_LEVEL":             "info",
		"DATABASE_URL":          w.notification,
		"DATABASE_ADMIN_URL":    w.notificationAdmin,
		"AMQP_URL":              w.amqpURL,
		"EMAILPROVIDER_URL":     "http://" + w.providerAddr,
		"EMAILPROVIDER_API_KEY": notificationKey,
		"PROVIDER_TIMEOUT":      "1s",
	}, extra))
}

// The API keys notification and the tests hold at the provider, both of account
// bookstore.
const (
	notificationKey = "test-notification-key-0123456789abcdef"
	providerKey     = "test-reader-key-0123456789abcdef0123"
)

// authorizedGet is a GET with the tests' API key, which the provider needs and
// notification ignores.
func authorizedGet(u string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+providerKey)
	return http.DefaultClient.Do(req)
}

func withExtra(m map[string]string, extra []string) map[string]string {
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// stockEvent builds the event inventory would publish for an order's outcome.
func stockEvent(t *testing.T, typ string, orderID uuid.UUID, to string) event.Envelope {
	t.Helper()
	lines := []contracts.Line{{BookID: uuid.MustParse("018f2b1e-0000-7000-8000-000000000001"), Quantity: 2}}
	var data any = contracts.StockReservedData{OrderID: orderID, CustomerEmail: to, Lines: lines}
	if typ == contracts.StockRejected {
		data = contracts.StockRejectedData{OrderID: orderID, CustomerEmail: to, Lines: lines, Reason: "insufficient stock"}
	}
	env, err := event.New("bookstore/inventory", typ, orderID.String(), 2, data)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// publish publishes events as inventory's relay does: persistent, with confirms (again
// when the broker nacks), the AMQP properties of the contracts, and the trace context in
// the envelope and the headers.
func publish(t *testing.T, amqpURL, traceparent string, envs ...event.Envelope) {
	t.Helper()
	msgs := make([]broker.Message, len(envs))
	for i, env := range envs {
		env.TraceParent = traceparent
		msg, err := broker.EventMessage(env, "inventory")
		if err != nil {
			t.Fatal(err)
		}
		if traceparent != "" {
			msg.Publishing.Headers = amqp.Table{"traceparent": traceparent}
		}
		msgs[i] = msg
	}
	sut.Publish(t, amqpURL, msgs...)
}

type record struct {
	OrderID        uuid.UUID `json:"order_id"`
	Kind           string    `json:"kind"`
	Status         string    `json:"status"`
	IdempotencyKey string    `json:"idempotency_key"`
	Attempts       int       `json:"attempts"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func getJSON(t *testing.T, u string, v any) int {
	t.Helper()
	resp, err := authorizedGet(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", u, err, b)
		}
	}
	return resp.StatusCode
}

func records(t *testing.T, n *testenv.Process, orderID uuid.UUID) []record {
	t.Helper()
	return getAll[record](t, n.Base+"/notifications?order_id="+orderID.String())
}

// getAll reads a whole list: the page at u and every page its next links lead to.
func getAll[T any](t *testing.T, u string) []T {
	t.Helper()
	var all []T
	for pages := 0; u != ""; pages++ {
		resp, err := authorizedGet(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var page []T
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("GET %s: %v: %s", u, err, b)
		}
		all = append(all, page...)
		next := httpapi.NextLink(resp.Header)
		if next == "" {
			break
		}
		if pages > 1000 {
			t.Fatalf("GET %s: more than 1000 pages", u)
		}
		nextURL, err := resp.Request.URL.Parse(next)
		if err != nil {
			t.Fatalf("GET %s: next link %q: %v", u, next, err)
		}
		u = nextURL.String()
	}
	return all
}

// waitStatus waits until the order's only record has the status and returns it.
func waitStatus(t *testing.T, n *testenv.Process, orderID uuid.UUID, status string, timeout time.Duration) record {
	t.Helper()
	var last []record
	testenv.Eventually(t, timeout, fmt.Sprintf("order %s's record to be %s (last seen %+v)", orderID, status, &last), func() bool {
		last = records(t, n, orderID)
		return len(last) == 1 && last[0].Status == status
	})
	return last[0]
}

type email struct {
	IdempotencyKey string `json:"idempotency_key"`
	To             string `json:"to"`
	Subject        string `json:"subject"`
	Deliveries     int    `json:"deliveries"`
}

func emails(t *testing.T, p *testenv.Process, to string) []email {
	t.Helper()
	return getAll[email](t, p.Base+"/v1/emails?to="+url.QueryEscape(to))
}

// wantOneEmail asserts the provider holds exactly one email for the address, under the
// order's key for kind, delivered exactly once.
func wantOneEmail(t *testing.T, p *testenv.Process, to string, orderID uuid.UUID, kind string) {
	t.Helper()
	list := emails(t, p, to)
	want := "order/" + orderID.String() + "/" + kind
	if len(list) != 1 || list[0].IdempotencyKey != want || list[0].Deliveries != 1 {
		t.Fatalf("provider holds %+v for %s, want one email %s with deliveries 1", list, to, want)
	}
}

func setFaults(t *testing.T, p *testenv.Process, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, p.Base+"/admin/faults", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+providerKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT /admin/faults: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /admin/faults %s: %d", body, resp.StatusCode)
	}
}

func connect(t *testing.T, databaseURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func purge(t *testing.T, amqpURL, queue string) {
	t.Helper()
	if n, err := sut.Channel(t, amqpURL).QueuePurge(queue, false); err != nil || n != 1 {
		t.Fatalf("purge %s: %d messages, %v", queue, n, err)
	}
}

// wantReconciledOnce checks the end of an attempt whose outcome was unknown: the order's
// confirmation is completed by a later attempt than the first, which asked the provider
// and found the email under its key, and the provider sent it once.
func wantReconciledOnce(t *testing.T, n, p *testenv.Process, orderID uuid.UUID, to string) {
	t.Helper()
	rec := waitStatus(t, n, orderID, "completed", 60*time.Second)
	if rec.Attempts < 2 {
		t.Fatalf("record %+v: completed by the first attempt, whose outcome should have been unknown", rec)
	}
	wantOneEmail(t, p, to, orderID, "order-confirmed")
	if got := testenv.Metric(t, n.Base, "bookstore_notification_reconciled_total", `outcome="found"`); got != 1 {
		t.Fatalf("reconciled found = %v, want 1", got)
	}
	if got := testenv.Metric(t, p.Base, "bookstore_emailprovider_sent_total"); got != 1 {
		t.Fatalf("the provider sent %v emails, want 1", got)
	}
}
