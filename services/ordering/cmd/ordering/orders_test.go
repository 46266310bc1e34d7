package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

func TestPlaceOrderPublishesOneEventWithTheContractsEnvelope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)

	resp, body := postOrder(t, base, "", orderBody("ada@example.com", 2))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var order struct {
		ID            string `json:"id"`
		CustomerEmail string `json:"customer_email"`
		Status        string `json:"status"`
		Lines         []struct {
			BookID   string `json:"book_id"`
			Quantity int    `json:"quantity"`
		} `json:"lines"`
	}
	decodeJSON(t, body, &order)
	if resp.Header.Get("Location") != "/orders/"+order.ID {
		t.Errorf("Location = %q, want /orders/%s", resp.Header.Get("Location"), order.ID)
	}
	if order.Status != "pending" || order.CustomerEmail != "ada@example.com" || len(order.Lines) != 1 || order.Lines[0].Quantity != 2 {
		t.Errorf("order = %+v", order)
	}

	get, err := http.Get(base + "/orders/" + order.ID)
	if err != nil || get.StatusCode != http.StatusOK {
		t.Fatalf("GET order: %v %v", err, get.Status)
	}
	get.Body.Close()

	msgs := sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, 2*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("got %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	sut.CheckDelivery(t, m) // the CloudEvents SDK and api/schemas
	env, err := event.Decode(m.Body, contracts.OrderPlaced)
	if err != nil {
		t.Fatalf("envelope: %v\n%s", err, m.Body)
	}
	var data contracts.OrderPlacedData
	if err := env.DecodeData(&data); err != nil {
		t.Fatal(err)
	}
	checks := map[string][2]string{
		"message_id = id":        {m.MessageId, env.ID},
		"type":                   {m.Type, contracts.OrderPlaced},
		"content_type":           {m.ContentType, event.ContentType},
		"app_id":                 {m.AppId, "ordering"},
		"source":                 {env.Source, "bookstore/ordering"},
		"subject = order id":     {env.Subject, order.ID},
		"sequence":               {env.Sequence, "1"},
		"data.order_id":          {data.OrderID.String(), order.ID},
		"data.customer_email":    {data.CustomerEmail, "ada@example.com"},
		"delivery_mode":          {fmt.Sprint(m.DeliveryMode), "2"},
		"traceparent header set": {fmt.Sprint(m.Headers["traceparent"] != nil), "true"},
		"traceparent in body":    {fmt.Sprint(strings.HasPrefix(env.TraceParent, "00-")), "true"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s: got %q, want %q", name, c[0], c[1])
		}
	}
	// The publish span is a child of the request's trace: same trace id in header and body.
	if h, _ := m.Headers["traceparent"].(string); len(h) < 35 || h[3:35] != env.TraceParent[3:35] {
		t.Errorf("traceparent header %q is not in the trace %q stored with the outbox row", h, env.TraceParent)
	}
}

func TestGetOrderAnswersProblemsForABadOrUnknownID(t *testing.T) {
	t.Parallel()
	base := startInProcess(t, newEnv(t))
	for path, want := range map[string]int{
		"/orders/not-a-uuid":                           http.StatusBadRequest,
		"/orders/018f2b1e-0000-7000-8000-00000000ffff": http.StatusNotFound,
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d %s, want %d problem+json", path, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
	}
}

func TestIdempotencyKeyReplayAndMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)

	first, firstBody := postOrder(t, base, "key-1", orderBody("ada@example.com", 2))
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", first.StatusCode, firstBody)
	}
	// Same body with other whitespace and field order: still the same request.
	again, againBody := postOrder(t, base, "key-1", fmt.Sprintf(`{"lines":[{"quantity":2,"book_id":%q}],"customer_email":"ada@example.com"}`, dune))
	if again.StatusCode != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d replayed=%q %s", again.StatusCode, again.Header.Get("Idempotent-Replayed"), againBody)
	}
	if string(againBody) != string(firstBody) || again.Header.Get("Location") != first.Header.Get("Location") {
		t.Errorf("replay body %s\nwant first body %s", againBody, firstBody)
	}
	mismatch, mismatchBody := postOrder(t, base, "key-1", orderBody("ada@example.com", 3))
	if mismatch.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(mismatchBody), "Idempotency-Key") {
		t.Errorf("mismatch: %d %s", mismatch.StatusCode, mismatchBody)
	}
	for _, bad := range []string{strings.Repeat("k", 256), "tab\tkey", "é"} {
		resp, body := postOrder(t, base, bad, orderBody("ada@example.com", 1))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Idempotency-Key") {
			t.Errorf("key %q: %d %s", bad, resp.StatusCode, body)
		}
	}

	db := testenv.Pool(t, e.databaseURL)
	if n := testenv.Count(t, db, "SELECT count(*) FROM orders"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM outbox"); n != 1 {
		t.Errorf("outbox rows = %d, want 1", n)
	}
}

func TestIdempotencyKeyConcurrentRequestsPlaceOneOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)

	const n = 20
	byStatus := map[int]int{}
	for _, r := range postAtOnce(t, base, "same-key", orderBody("grace@example.com", 1), n) {
		byStatus[r.status]++
	}
	t.Logf("responses by status: %v", byStatus)
	if byStatus[http.StatusCreated] != 1 || byStatus[http.StatusCreated]+byStatus[http.StatusOK]+byStatus[http.StatusConflict] != n {
		t.Errorf("want exactly one 201 and the rest 200 or 409, got %v", byStatus)
	}
	db := testenv.Pool(t, e.databaseURL)
	if got := testenv.Count(t, db, "SELECT count(*) FROM orders"); got != 1 {
		t.Errorf("orders = %d, want 1", got)
	}
	msgs := sut.Drain(t, e.amqpURL, contracts.QueueInventoryOrderPlaced, 2*time.Second)
	if len(msgs) != 1 {
		t.Errorf("events published = %d, want 1", len(msgs))
	}
}

// Once the first request of a key has committed, every retry is a replay, however many
// arrive at once: none is told "in flight" (409) about a request that has finished.
func TestConcurrentReplaysOfAFinishedRequestAreAllAnsweredAsTheFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	first, firstBody := postOrder(t, base, "done-key", orderBody("grace@example.com", 1))
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", first.StatusCode, firstBody)
	}

	for i, r := range postAtOnce(t, base, "done-key", orderBody("grace@example.com", 1), 20) {
		if r.status != http.StatusOK || string(r.body) != string(firstBody) {
			t.Errorf("replay %d: %d %s, want 200 with the first body %s", i, r.status, r.body, firstBody)
		}
	}
}

type answer struct {
	status int
	body   []byte
}

// postAtOnce sends n copies of one POST /orders with key, released together, and returns
// their answers.
func postAtOnce(t *testing.T, base, key, body string, n int) []answer {
	t.Helper()
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, b := postOrder(t, base, key, body)
			answers[i] = answer{resp.StatusCode, b}
		}()
	}
	close(start)
	wg.Wait()
	return answers
}

func TestBadInputIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	line := func(id string, q int) string { return fmt.Sprintf(`{"book_id": %q, "quantity": %d}`, id, q) }
	lines := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = line(fmt.Sprintf("018f2b1e-0000-7000-8000-%012d", i+1), 1)
		}
		return strings.Join(parts, ",")
	}
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"not JSON", `{"customer_email": `, 400, ""},
		{"empty body", ``, 400, ""},
		{"two values", orderBody("a@example.com", 1) + `{}`, 400, ""},
		{"unknown field", `{"customer_email": "a@example.com", "lines": [], "coupon": "X"}`, 400, "coupon"},
		{"wrong type", `{"customer_email": 42, "lines": []}`, 400, "customer_email"},
		{"quantity not a number", `{"customer_email": "a@example.com", "lines": [{"book_id": "` + dune + `", "quantity": "2"}]}`, 400, "lines[0].quantity"},
		{"book_id not a UUID", `{"customer_email": "a@example.com", "lines": [{"book_id": "dune", "quantity": 2}]}`, 422, "lines[0].book_id"},
		{"email missing", `{"lines": [` + line(dune, 1) + `]}`, 422, "customer_email"},
		{"email invalid", `{"customer_email": "not-an-email", "lines": [` + line(dune, 1) + `]}`, 422, "customer_email"},
		{"email with a name", `{"customer_email": "Ada <ada@example.com>", "lines": [` + line(dune, 1) + `]}`, 422, "customer_email"},
		{"no lines", `{"customer_email": "a@example.com", "lines": []}`, 422, "lines"},
		{"51 lines", `{"customer_email": "a@example.com", "lines": [` + lines(51) + `]}`, 422, "lines"},
		{"duplicate book", `{"customer_email": "a@example.com", "lines": [` + line(dune, 1) + `,` + line(dune, 2) + `]}`, 422, "lines[1].book_id"},
		{"quantity 0", `{"customer_email": "a@example.com", "lines": [` + line(dune, 0) + `]}`, 422, "lines[0].quantity"},
		{"quantity 101", `{"customer_email": "a@example.com", "lines": [` + line(dune, 101) + `]}`, 422, "lines[0].quantity"},
		{"missing book_id", `{"customer_email": "a@example.com", "lines": [{"quantity": 1}]}`, 422, "lines[0].book_id"},
		{"1 MiB body", `{"customer_email": "` + strings.Repeat("a", 1<<20) + `@example.com", "lines": []}`, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := postOrder(t, base, "", c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			var p struct {
				Type, Title, Detail string
				Status              int
				Errors              []struct{ Field, Detail string }
			}
			decodeJSON(t, body, &p)
			if p.Type == "" || p.Title == "" || p.Detail == "" || p.Status != c.status {
				t.Errorf("incomplete problem: %s", body)
			}
			if c.field != "" {
				named := false
				for _, fe := range p.Errors {
					named = named || fe.Field == c.field
				}
				if !named || !strings.Contains(p.Detail, c.field) {
					t.Errorf("problem does not name %q: %s", c.field, body)
				}
			}
		})
	}
	// 50 lines is the limit, not past it.
	if resp, body := postOrder(t, base, "", `{"customer_email": "a@example.com", "lines": [`+lines(50)+`]}`); resp.StatusCode != http.StatusCreated {
		t.Errorf("50 lines: %d %s", resp.StatusCode, body)
	}
	if n := testenv.Count(t, testenv.Pool(t, e.databaseURL), "SELECT count(*) FROM orders"); n != 1 {
		t.Errorf("orders = %d, want only the valid one", n)
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"DATABASE_URL", "AMQP_URL", "HTTP_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT", "LOG_LEVEL", "BOOKSTORE_FAILPOINTS", "ORDERING_PUBLISHER"} {
		if !strings.Contains(out.String(), v) {
			t.Errorf("--help does not mention %s:\n%s", v, out.String())
		}
	}
}
