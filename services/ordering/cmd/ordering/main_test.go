package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
)

// The tests of this file start the real ordering service, in-process through run() or as
// a real process where it has to die, against the real Postgres and RabbitMQ.

const dune = "018f2b1e-0000-7000-8000-000000000001"

// sut is the system under test, as testenv's helpers see it.
var sut = testenv.System{
	Topology:  contracts.Topology,
	Contracts: apitest.Checker{}, // every request, response and event against api/
}

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// env is one ordering instance's configuration: its own database and vhost.
type env struct {
	adminURL, databaseURL, amqpURL string
}

func newEnv(t *testing.T) env {
	t.Helper()
	admin, db := testenv.Database(t, "ordering")
	amqpURL := testenv.VHost(t)
	// Ordering declares only its own queue; inventory's, which the tests read, is
	// inventory's to declare. Declared here for the whole system, as inventory would have,
	// so no OrderPlaced of a test comes back unroutable.
	sut.Channel(t, amqpURL)
	return env{adminURL: admin, databaseURL: db, amqpURL: amqpURL}
}

// vars is the service's environment; extra adds name, value pairs.
func (e env) vars(extra ...string) map[string]string {
	m := map[string]string{
		"DATABASE_URL":       e.databaseURL,
		"DATABASE_ADMIN_URL": e.adminURL,
		"AMQP_URL":           e.amqpURL,
		"LOG_LEVEL":          "warn",
		// No load shedding unless a test asks for it (shed_test.go): twenty requests at
		// once on a pool of four can wait past the default 500 ms on a busy machine, and
		// a 503 is not what those tests are about.
		"ORDERING_POOL_WAIT": "1m",
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

// startProcess runs the built ordering command as a real OS process, for the tests that
// kill it.
func startProcess(t *testing.T, e env, extra ...string) *testenv.Process {
	t.Helper()
	return sut.StartProcess(t, testenv.Build(t, "."), nil, e.vars(extra...))
}

func postOrder(t *testing.T, base, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /orders: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func orderBody(email string, qty int) string {
	return fmt.Sprintf(`{"customer_email": %q, "lines": [{"book_id": %q, "quantity": %d}]}`, email, dune, qty)
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
