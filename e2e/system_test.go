// Package e2e runs the four Bookstore services as real processes, built from this
// repository, against the real Postgres and RabbitMQ, and follows orders through all of
// them over their public APIs only.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv"
)

var services = []string{"emailprovider", "inventory", "ordering", "notification"}

// sut is the system under test, as testenv's helpers see it.
var sut = testenv.System{
	Topology:  contracts.Topology,
	Contracts: apitest.Checker{}, // every request, response and event against api/
}

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// system is one running Bookstore: four processes, four databases, one vhost.
type system struct {
	t       testing.TB
	URL     map[string]string // service -> base URL
	DB      map[string]string // service -> DATABASE_URL
	AMQPURL string
	procs   map[string]*testenv.Process
}

// The API keys notification and the tests hold at the email provider, both of account
// bookstore: the tests read what notification sent, as the storefront does, and hold
// every scope to arrange the rest. Every request the tests send carries readerKey; the
// other services ignore it.
const (
	notificationKey = "e2e-notification-key-0123456789abcdef"
	readerKey       = "e2e-reader-key-0123456789abcdef012345"
)

// startSystem starts the four services on the machine's Postgres and RabbitMQ, each
// service with a database and role of its own; extra adds environment variables per
// service.
func startSystem(t testing.TB, extra map[string]map[string]string) *system {
	t.Helper()
	amqpURL := testenv.VHost(t)
	return startServices(t, amqpURL, func(name string) servers {
		admin, db := testenv.Database(t, name)
		return servers{DatabaseURL: db, AdminURL: admin, AMQPURL: amqpURL, Extra: extra[name]}
	})
}

// servers are the connections one service is started with.
type servers struct {
	DatabaseURL, AdminURL, AMQPURL string
	Extra                          map[string]string // more environment, over the defaults
}

// startServices starts the four services, in order, each on the servers serversOf gives
// it; amqpURL is the one the tests themselves use.
func startServices(t testing.TB, amqpURL string, serversOf func(name string) servers) *system {
	t.Helper()
	s := &system{t: t, URL: map[string]string{}, DB: map[string]string{}, AMQPURL: amqpURL, procs: map[string]*testenv.Process{}}
	for _, name := range services {
		bin := testenv.Build(t, "github.com/bookstore-go/bookstore/services/"+name+"/cmd/"+name)
		srv := serversOf(name)
		env := map[string]string{
			"DATABASE_URL": srv.DatabaseURL, "DATABASE_ADMIN_URL": srv.AdminURL, "AMQP_URL": srv.AMQPURL,
			"LOG_LEVEL": "info", "OTEL_BSP_SCHEDULE_DELAY": "100",
		}
		switch name {
		case "emailprovider":
			env["EMAILPROVIDER_API_KEYS"] = "bookstore:" + notificationKey + ":send,read,bookstore:" + readerKey + ":send,read,admin"
		case "notification":
			env["EMAILPROVIDER_URL"] = s.URL["emailprovider"]
			env["EMAILPROVIDER_API_KEY"] = notificationKey
		case "inventory":
			env["INVENTORY_ADMIN"] = "1" // the tests set the stock with PUT /books/{id}
		}
		maps.Copy(env, srv.Extra)
		s.procs[name] = sut.StartProcess(t, bin, nil, env)
		s.URL[name], s.DB[name] = s.procs[name].Base, srv.DatabaseURL
	}
	return s
}

func (s *system) logs(name string) string { return s.procs[name].Log() }

// call sends a JSON request and decodes a JSON answer into out (if not nil).
func (s *system) call(method, url string, body any, out any, header ...string) int {
	s.t.Helper()
	var payload []byte
	if body != nil {
		payload, _ = json.Marshal(body)
	}
	var resp *http.Response
	// A 503 with Retry-After is ordering shedding load: nothing was done, and a client
	// sends the same request again after the wait, as these tests' many clients at once
	// on a loaded machine must.
	for try := 1; ; try++ {
		req, _ := http.NewRequest(method, url, bytes.NewReader(payload))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+readerKey)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		var err error
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			s.t.Fatalf("%s %s: %v", method, url, err)
		}
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusServiceUnavailable || wait <= 0 || try == 20 {
			break
		}
		resp.Body.Close()
		time.Sleep(time.Duration(wait) * time.Second)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: decode %s: %v", method, url, b, err)
		}
	}
	return resp.StatusCode
}

type line struct {
	BookID   string `json:"book_id"`
	Quantity int    `json:"quantity"`
}

type order struct {
	ID            string `json:"id"`
	CustomerEmail string `json:"customer_email"`
	Status        string `json:"status"`
	Lines         []line `json:"lines"`
}

type book struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	OnHand    int    `json:"on_hand"`
	Reserved  int    `json:"reserved"`
	Available int    `json:"available"`
}

type notification struct {
	OrderID        string `json:"order_id"`
	Kind           string `json:"kind"`
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
	Attempts       int    `json:"attempts"`
}

type email struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	To             string `json:"to"`
	Subject        string `json:"subject"`
	Deliveries     int    `json:"deliveries"`
}

func bookID(n int) string { return fmt.Sprintf("018f2b1e-0000-7000-8000-%012d", n) }

func (s *system) setStock(id, title string, onHand int) {
	s.t.Helper()
	if code := s.call(http.MethodPut, s.URL["inventory"]+"/books/"+id, map[string]any{"title": title, "on_hand": onHand}, nil); code != http.StatusOK && code != http.StatusCreated {
		s.t.Fatalf("PUT /books/%s: %d", id, code)
	}
}

func (s *system) book(id string) book {
	s.t.Helper()
	var b book
	if code := s.call(http.MethodGet, s.URL["inventory"]+"/books/"+id, nil, &b); code != http.StatusOK {
		s.t.Fatalf("GET /books/%s: %d", id, code)
	}
	return b
}

func (s *system) placeOrder(email string, lines ...line) order {
	s.t.Helper()
	var o order
	if code := s.call(http.MethodPost, s.URL["ordering"]+"/orders", map[string]any{"customer_email": email, "lines": lines}, &o); code != http.StatusCreated {
		s.t.Fatalf("POST /orders: %d", code)
	}
	return o
}

// settled waits until the order is confirmed or rejected and returns it.
func (s *system) settled(id string, timeout time.Duration) order {
	s.t.Helper()
	var o order
	testenv.Eventually(s.t, timeout, "order "+id+" settled", func() bool {
		s.call(http.MethodGet, s.URL["ordering"]+"/orders/"+id, nil, &o)
		return o.Status == "confirmed" || o.Status == "rejected"
	})
	return o
}

func (s *system) notifications(orderID string) []notification {
	s.t.Helper()
	return getAll[notification](s.t, s.URL["notification"]+"/notifications?order_id="+orderID)
}

func (s *system) emailsTo(address string) []email {
	s.t.Helper()
	return getAll[email](s.t, s.URL["emailprovider"]+"/v1/emails?to="+url.QueryEscape(address))
}

// getAll reads a whole list of the contracts' APIs, following each page's next link
// (Link: <...>; rel="next") until the last page, which has none.
func getAll[T any](t testing.TB, u string) []T {
	t.Helper()
	var all []T
	for u != "" {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		req.Header.Set("Authorization", "Bearer "+readerKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		var page []T
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("GET %s: decode %s: %v", u, b, err)
		}
		all = append(all, page...)
		next := httpapi.NextLink(resp.Header)
		if next == "" {
			break
		}
		nextURL, err := resp.Request.URL.Parse(next)
		if err != nil {
			t.Fatalf("GET %s: next link %q: %v", u, next, err)
		}
		u = nextURL.String()
	}
	return all
}

// emailed waits until the order's notification is completed and returns the emails the
// provider holds for the address.
func (s *system) emailed(orderID, address string) (notification, []email) {
	s.t.Helper()
	var n notification
	testenv.Eventually(s.t, 30*time.Second, "notification completed for "+orderID, func() bool {
		ns := s.notifications(orderID)
		if len(ns) == 1 && ns[0].Status == "completed" {
			n = ns[0]
			return true
		}
		return false
	})
	return n, s.emailsTo(address)
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func decode(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
