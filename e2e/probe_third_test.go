package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

// Probes of what each caller may do, against the running system: each caller may do
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

// rssKB is the resident memory of process pid, in KB (/proc/<pid>/status, VmRSS).
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// fds is how many file descriptors process pid has open.
func fds(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// One client holding thousands of idle keep-alive connections to ordering: the service
// keeps at most httpapi.MaxConns (1,024) of them, closing the idle ones past it, so its
// file descriptors stay bounded, its memory grows no further from 3,000 connections to
// 6,000 (about 23 KB a connection held), and /healthz answers at once.
func TestThousandsOfIdleConnectionsLeaveAServiceAnsweringInBoundedMemory(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	addr := strings.TrimPrefix(s.URL["ordering"], "http://")
	pid := s.procs["ordering"].Pid()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	hold := func(n int) {
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	open := func() int {
		n := 0
		for _, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
				n++
			}
		}
		return n
	}
	before, fdsBefore := rssKB(t, pid), fds(t, pid)
	hold(3000)
	at3000, fdsAt3000 := rssKB(t, pid), fds(t, pid)
	hold(3000)
	at6000, fdsAt6000 := rssKB(t, pid), fds(t, pid)
	// A connection the service evicts is closed once its reading goroutine lets go of
	// it, a moment later on a busy machine: count again until the count settles.
	stillOpen := open()
	for settle := time.Now().Add(5 * time.Second); stillOpen > 1024 && time.Now().Before(settle); {
		time.Sleep(100 * time.Millisecond)
		stillOpen = open()
	}
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get(s.URL["ordering"] + "/healthz")
	if err != nil {
		t.Fatalf("/healthz beside %d idle connections: %v", stillOpen, err)
	}
	resp.Body.Close()
	t.Logf("ordering with 0, 3,000 and 6,000 idle connections sent: RSS %d, %d, %d KB; file descriptors %d, %d, %d; %d connections still open",
		before, at3000, at6000, fdsBefore, fdsAt3000, fdsAt6000, stillOpen)
	if stillOpen > 1024 || fdsAt6000-fdsBefore > 1024+16 {
		t.Errorf("ordering holds %d of 6,000 idle connections and %d more file descriptors, want at most 1,024", stillOpen, fdsAt6000-fdsBefore)
	}
	if at6000-at3000 > 16<<10 {
		t.Errorf("ordering's memory grew by %d KB from 3,000 idle connections to 6,000, want it bounded (at most 16 MB more)", at6000-at3000)
	}
}

// Refused requests are logged at a bounded rate against the running system: 2,000 404s
// to ordering from one client write a few dozen access lines, the rest counted in
// bookstore_http_refused_unlogged_total; and the storefront's journey of an order nobody
// placed asks ordering alone, so inventory and notification log nothing of it.
func TestRefusedRequestsLogAtABoundedRateAndAnUnknownJourneyAsksOrderingAlone(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	sf := sut.StartProcess(t, testenv.Build(t, "github.com/bookstore-go/bookstore/services/storefront/cmd/storefront"), nil, map[string]string{
		"ORDERING_URL": s.URL["ordering"], "INVENTORY_URL": s.URL["inventory"], "NOTIFICATION_URL": s.URL["notification"],
		"EMAILPROVIDER_URL": s.URL["emailprovider"],
	})
	id := uuid.Must(uuid.NewV7()).String()
	resp, err := http.Get(sf.Base + "/api/orders/" + id + "/journey")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the journey of an order nobody placed: %d, want 404", resp.StatusCode)
	}
	testenv.Eventually(t, 10*time.Second, "ordering's line of the unknown order", func() bool { return strings.Contains(s.logs("ordering"), id) })
	for _, service := range []string{"inventory", "notification"} {
		if strings.Contains(s.logs(service), id) {
			t.Errorf("%s was asked about the unknown order %s", service, id)
		}
	}
	if got := strings.Count(s.logs("ordering"), id); got != 1 {
		t.Errorf("ordering logged the unknown order %d times, want once", got)
	}

	accessLines := func(service string) int { return strings.Count(s.logs(service), `"msg":"http request"`) }

	before, beforeBytes := accessLines("ordering"), len(s.logs("ordering"))
	const n = 2000
	client := &http.Client{}
	start := time.Now()
	for i := range n {
		resp, err := client.Get(s.URL["ordering"] + "/no-such-path-" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	elapsed := time.Since(start)
	lines, grew := accessLines("ordering")-before, len(s.logs("ordering"))-beforeBytes
	t.Logf("%d refused requests in %v: %d access lines, %d log bytes (%d a request)", n, elapsed, lines, grew, grew/n)
	if max := 20 + int(elapsed.Seconds()*5) + 1; lines > max {
		t.Errorf("%d refused requests in %v wrote %d access lines, want at most %d", n, elapsed, lines, max)
	}
	if got := testenv.Metric(t, s.URL["ordering"], "bookstore_http_refused_unlogged_total"); int(got)+lines < n {
		t.Errorf("bookstore_http_refused_unlogged_total = %v beside %d lines, want the %d refusals between them", got, lines, n)
	}
}

// A book's title follows the text rule of events: a bidi override is a 422 naming title
// (an escape sequence or a bell is refused already as the JSON is read, 400 naming
// title), and the catalogue the storefront shows keeps none.
func TestATitleWithControlOrBidiCharactersIsRefused(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	before := changes(t, s)
	for i, title := range []string{"evil\u202Egnp.exe", "a\u001b[31mred", "bell\u0007"} {
		p := probe{method: "PUT", path: "/books/" + bookID(100+i), body: `{"title":"` + title + `","on_hand":1}`}
		if status, problem, raw := send(t, s.URL["inventory"], p); (status != 400 && status != 422) || problem == nil || !strings.Contains(raw, `title`) {
			t.Errorf("PUT a title %s: %d %s, want 400 or 422 naming title", title, status, raw)
		}
	}
	if after := changes(t, s); after != before {
		t.Errorf("the refused titles changed the system: %+v before, %+v after", before, after)
	}
}

// The framing probes against the running system: a body labelled gzip is 415 naming
// Content-Encoding, and places no order; a request with Content-Length beside
// Transfer-Encoding, a bare LF or a folded header gets its answer (400 for the last two)
// and its connection closed, so the request smuggled behind it is never served.
func TestAMisframedOrEncodedRequestIsRefusedAndItsConnectionClosed(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	s.setStock(bookID(1), "Dune", 10)
	order := `{"customer_email":"ada@example.com","lines":[{"book_id":"` + bookID(1) + `","quantity":1}]}`
	p := probe{method: "POST", path: "/orders", header: []string{"Idempotency-Key", "gzip-probe", "Content-Encoding", "gzip"}, body: order, status: 415, names: "Content-Encoding"}
	if status, problem, raw := send(t, s.URL["ordering"], p); status != p.status || problem == nil || !strings.Contains(raw, p.names) {
		t.Errorf("a JSON body labelled gzip: %d %s, want 415 naming Content-Encoding", status, raw)
	}
	if st := changes(t, s); st.orders != 0 {
		t.Errorf("a JSON body labelled gzip placed %d orders", st.orders)
	}

	addr := strings.TrimPrefix(s.URL["ordering"], "http://")
	smuggled := "GET /orders/" + bookID(9) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	for name, raw := range map[string]string{
		"Content-Length beside Transfer-Encoding": "POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIdempotency-Key: te\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"a bare LF":       "GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\n",
		"a folded header": "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Probe: a\r\n b\r\n\r\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, raw+smuggled); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(c)
		first, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Errorf("%s: no answer: %v", name, err)
			c.Close()
			continue
		}
		_, _ = io.Copy(io.Discard, first.Body)
		first.Body.Close()
		if name != "Content-Length beside Transfer-Encoding" && first.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: answered %s, want 400", name, first.Status)
		}
		if second, err := http.ReadResponse(r, nil); err == nil {
			t.Errorf("%s: the request smuggled behind it was answered %s; want the connection closed", name, second.Status)
		}
		c.Close()
	}
}
