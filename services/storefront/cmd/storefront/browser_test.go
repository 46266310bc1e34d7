package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
)

// The storefront's test starts the real system (the four services as processes, against
// the real Postgres and RabbitMQ, and the storefront itself) and drives the page in a real
// headless Chromium, as a learner would.

// sut is the system under test, as testenv's helpers see it.
var sut = testenv.System{
	Topology:  contracts.Topology,
	Contracts: apitest.Checker{}, // every request the test sends a service, against api/
}

func TestMain(m *testing.M) {
	testenv.Main(m)
}

const (
	dune      = "018f2b1e-0000-7000-8000-000000000001"
	jaegerURL = "http://jaeger.test:16686"
	sourceURL = "https://github.com/bookstore-go/bookstore/blob/main/"
	// relayPause is how long the panel's button stops the relay: long enough for the test
	// to place an order and see it written but not published while the relay is stopped.
	relayPause = 5 * time.Second
)

// system is the four services and the storefront in front of them.
type system struct {
	url map[string]string // service name -> base URL
	db  map[string]string // service name -> database URL
}

// The API keys notification and the storefront hold at the provider, in one account.
const (
	notificationKey = "test-notification-key-0123456789abcdef"
	storefrontKey   = "test-storefront-key-0123456789abcdef00"
)

func startSystem(t *testing.T) *system {
	t.Helper()
	s := &system{url: map[string]string{}, db: map[string]string{}}
	amqpURL := testenv.VHost(t)
	var relay *testenv.Process // ordering's outbox relay, a process of its own
	for _, name := range []string{"emailprovider", "inventory", "ordering", "notification"} {
		bin := testenv.Build(t, "github.com/bookstore-go/bookstore/services/"+name+"/cmd/"+name)
		admin, db := testenv.Database(t, name)
		env := map[string]string{"DATABASE_URL": db, "DATABASE_ADMIN_URL": admin, "AMQP_URL": amqpURL, "LOG_LEVEL": "info"}
		switch name {
		case "emailprovider":
			env["EMAILPROVIDER_ADMIN"] = "1" // the break-it panel's ambiguous answers
			env["EMAILPROVIDER_API_KEYS"] = "bookstore:" + notificationKey + ":send,read,bookstore:" + storefrontKey + ":read,admin"
		case "inventory":
			env["INVENTORY_ADMIN"] = "1" // the test sets the stock with PUT /books/{id}
		case "notification":
			env["EMAILPROVIDER_URL"] = s.url["emailprovider"]
			env["EMAILPROVIDER_API_KEY"] = notificationKey
			env["PROVIDER_TIMEOUT"] = "1s" // an ambiguous answer is given up on soon
		}
		if name == "ordering" {
			env["ORDERING_RELAY"] = "0" // the relay runs apart, as under STOREFRONT_DEMOS=1 make run
		}
		p := sut.StartProcess(t, bin, nil, env)
		s.url[name], s.db[name] = p.Base, db
		if name == "ordering" {
			delete(env, "ORDERING_RELAY")
			relay = sut.StartProcess(t, bin, []string{"relay"}, env)
		}
	}
	storefront := sut.StartProcess(t, testenv.Build(t, "."), nil, map[string]string{
		"ORDERING_URL": s.url["ordering"], "INVENTORY_URL": s.url["inventory"],
		"NOTIFICATION_URL": s.url["notification"], "EMAILPROVIDER_URL": s.url["emailprovider"], "EMAILPROVIDER_API_KEY": storefrontKey,
		"JAEGER_URL": jaegerURL, "SOURCE_URL": sourceURL, "STOREFRONT_DEMOS": "1", "LOG_LEVEL": "info",
		"STOREFRONT_RELAY_PID": strconv.Itoa(relay.Pid()), "STOREFRONT_RELAY_PAUSE": relayPause.String(),
	})
	s.url["storefront"] = storefront.Base
	return s
}

func (s *system) setStock(t *testing.T, id, title string, onHand int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"title": title, "on_hand": onHand})
	req, _ := http.NewRequest(http.MethodPut, s.url["inventory"]+"/books/"+id, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT /books/%s: %d", id, resp.StatusCode)
	}
}

// chromium is the browser's path: CHROMIUM, or chromium on the PATH. Without one the test
// is skipped on a developer's machine and fails in CI (CI=true), where .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path, _ = exec.LookPath("chromium")
	}
	if path == "" {
		testenv.Unavailable(t, "Chromium (set CHROMIUM, or apt-get install chromium; .ci/run installs it)", exec.ErrNotFound)
	}
	return path
}

// browser starts a headless Chromium with the flags this closed network needs and a
// fresh profile, and returns its chromedp context.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 1700),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline of its own
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// do runs actions with a deadline: every wait of the test is on an element or a
// condition of the page, bounded here, never a fixed sleep.
func do(t *testing.T, ctx context.Context, what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		t.Fatalf("%s: %v\npage:\n%s", what, err, pageHTML(ctx))
	}
}

// get runs one action that reads a value, with a deadline.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		t.Fatalf("%s: %v\npage:\n%s", what, err, pageHTML(ctx))
	}
	return v
}

// pageHTML is the page's main element, for a failure's message.
func pageHTML(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").outerHTML`))
	if err != nil {
		return err.Error()
	}
	return html
}

// steps are the journey's steps, in the order they happen.
var steps = []string{"placed", "published", "reserved", "announced", "applied", "email", "delivered"}

// cancelSteps are the steps a cancellation adds to the journey, in the order they happen.
var cancelSteps = []string{"cancelled", "cancel-published", "released", "release-announced", "release-applied", "cancel-email", "cancel-delivered"}

// fill fills the order form.
func fill(quantity int, email string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.SetValue(chromedp.ID("order-book"), dune),
		chromedp.SetValue(chromedp.ID("order-quantity"), fmt.Sprint(quantity)),
		chromedp.SetValue(chromedp.ID("order-email"), email),
	)
}

// available waits until the page shows Dune's available stock as want.
func available(want int) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector("#book-%s .available").textContent.trim() === "%d"`, dune, want),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))
}

func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	return strings.TrimSpace(get(t, ctx, "text of "+css, chromedp.Text(chromedp.CSS(css))))
}

func href(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	return get(t, ctx, "href of "+css, chromedp.AttributeValue(chromedp.CSS(css), "href")).Value
}

// watchJourney waits for each step in turn to show state ("done", or "rejected" for the
// steps of a rejection), with its time and its links, and for the journey to end.
func watchJourney(t *testing.T, ctx context.Context, orderID string, states map[string]string) {
	t.Helper()
	watchSteps(t, ctx, orderID, steps, states)
}

// watchSteps waits for each of keys in turn as watchJourney does, and for the journey to
// end.
func watchSteps(t *testing.T, ctx context.Context, orderID string, keys []string, states map[string]string) {
	t.Helper()
	do(t, ctx, "journey of "+orderID, 10*time.Second,
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#journey[data-order="%s"]`, orderID))))
	for _, step := range keys {
		state := states[step]
		if state == "" {
			state = "done"
		}
		sel := fmt.Sprintf(`#step-%s[data-state="%s"]`, step, state)
		do(t, ctx, "step "+step+" "+state, 30*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)))
		if at := text(t, ctx, sel+" .at"); !strings.HasSuffix(at, " UTC") {
			t.Errorf("step %s shows no time: %q", step, at)
		}
		if source := href(t, ctx, sel+" a.source"); !strings.HasPrefix(source, sourceURL+"services/") || !strings.HasSuffix(source, ".go") {
			t.Errorf("step %s links its source to %q", step, source)
		}
	}
	do(t, ctx, "journey over", 30*time.Second, chromedp.WaitVisible(chromedp.CSS(`#journey[data-done="true"]`)))
	if trace := href(t, ctx, "#step-placed a.trace"); !strings.HasPrefix(trace, jaegerURL+"/trace/") || len(trace) != len(jaegerURL+"/trace/")+32 {
		t.Errorf("trace link %q, want %s/trace/<trace id>", trace, jaegerURL)
	}
}

// placedOrder waits for the page to follow an order other than previous and returns
// its id.
func placedOrder(t *testing.T, ctx context.Context, previous string) string {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := chromedp.Run(tctx, chromedp.Poll[string](fmt.Sprintf(
		`(() => { const o = document.getElementById("journey").dataset.order; return o && o !== %q ? o : false })()`, previous),
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		t.Fatalf("no order placed: %v\npage:\n%s", err, pageHTML(ctx))
	}
	return id
}

// screenshot saves the page as a PNG in STOREFRONT_SCREENSHOTS (docs/img for the README)
// when that is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("STOREFRONT_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStorefrontShowsAnOrdersJourneyInABrowser: load the page, order a book and watch
// every step of its journey appear, the stock fall and the email arrive once; order more
// than there is and watch the rejection; double-click and see one order; switch the
// provider to ambiguous answers and see the email still delivered once; pause the relay
// and see an order written at once, published only when the relay continues, and still
// answered once.
func TestStorefrontShowsAnOrdersJourneyInABrowser(t *testing.T) {
	s := startSystem(t)
	s.setStock(t, dune, "Dune", 5)
	ctx := browser(t)

	do(t, ctx, "load the page", 20*time.Second,
		chromedp.Navigate(s.url["storefront"]),
		chromedp.WaitVisible(chromedp.ID("book-"+dune)),
		available(5))

	// An order of two: every step appears, Dune falls to 3, one email delivered once.
	do(t, ctx, "order two", 10*time.Second, fill(2, "ada@example.com"), chromedp.Click(chromedp.ID("order-submit")))
	first := placedOrder(t, ctx, "")
	watchJourney(t, ctx, first, nil)
	do(t, ctx, "stock falls", 10*time.Second, available(3))
	if d := text(t, ctx, "#step-delivered .detail"); !strings.Contains(d, "delivered 1 time(s)") || !strings.Contains(d, "ada@example.com") {
		t.Errorf("delivered step says %q, want one delivery to ada@example.com", d)
	}
	if e := text(t, ctx, "#step-email .detail"); !strings.Contains(e, "order-confirmed: completed") {
		t.Errorf("email step says %q, want order-confirmed: completed", e)
	}
	screenshot(t, ctx, "storefront-journey.png")

	// More than there is: rejected by inventory, the order rejected, a rejection email;
	// the stock unchanged.
	do(t, ctx, "order fifty", 10*time.Second, fill(50, "bob@example.com"), chromedp.Click(chromedp.ID("order-submit")))
	rejected := placedOrder(t, ctx, first)
	watchJourney(t, ctx, rejected, map[string]string{"reserved": "rejected", "applied": "rejected"})
	do(t, ctx, "stock unchanged", 10*time.Second, available(3),
		chromedp.WaitVisible(chromedp.CSS(`#journey[data-status="rejected"]`)))
	if e := text(t, ctx, "#step-email .detail"); !strings.Contains(e, "order-rejected: completed") {
		t.Errorf("email step says %q, want order-rejected: completed", e)
	}

	// A double click sends the form twice with the same key: one order, one copy
	// reserved, one email.
	do(t, ctx, "double click", 10*time.Second, fill(1, "carol@example.com"),
		chromedp.Click(chromedp.ID("order-submit")), chromedp.Click(chromedp.ID("order-submit")))
	double := placedOrder(t, ctx, rejected)
	// Both clicks reached ordering: the second was answered with the first's order.
	do(t, ctx, "the second click replayed", 10*time.Second,
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#order-message[data-replayed="%s"]`, double))))
	watchJourney(t, ctx, double, nil)
	do(t, ctx, "one copy reserved", 10*time.Second, available(2))
	if n := testenv.Count(t, testenv.Pool(t, s.db["ordering"]), "SELECT count(*) FROM orders WHERE customer_email = 'carol@example.com'"); n != 1 {
		t.Errorf("a double click placed %d orders, want 1", n)
	}
	if n := testenv.Count(t, testenv.Pool(t, s.db["emailprovider"]), "SELECT count(*) FROM emails WHERE recipient = 'carol@example.com'"); n != 1 {
		t.Errorf("%d emails to carol@example.com, want 1", n)
	}

	// Break it: the provider sends, then stalls its answer. The email is still delivered
	// once: notification's next attempt finds it by its key before sending again.
	do(t, ctx, "ambiguous answers on", 10*time.Second,
		chromedp.Click(chromedp.ID("demo-ambiguous")),
		chromedp.WaitVisible(chromedp.CSS(`#demo-ambiguous[data-on="true"]`)))
	do(t, ctx, "order one more", 10*time.Second, fill(1, "dan@example.com"), chromedp.Click(chromedp.ID("order-submit")))
	ambiguous := placedOrder(t, ctx, double)
	watchJourney(t, ctx, ambiguous, nil)
	do(t, ctx, "one more copy reserved", 10*time.Second, available(1))
	if d := text(t, ctx, "#step-delivered .detail"); !strings.Contains(d, "delivered 1 time(s)") {
		t.Errorf("after an ambiguous answer the delivered step says %q, want one delivery", d)
	}
	if e := text(t, ctx, "#step-email .detail"); strings.Contains(e, "after 1 provider attempt(s)") {
		t.Errorf("email step says %q: the ambiguous answer should have cost an attempt", e)
	}
	screenshot(t, ctx, "storefront-demos.png")
	do(t, ctx, "ambiguous answers off", 10*time.Second,
		chromedp.Click(chromedp.ID("demo-ambiguous")),
		chromedp.WaitVisible(chromedp.CSS(`#demo-ambiguous[data-on="false"]`)))

	// Break it: the relay stopped (SIGSTOP). The order and its outbox row are written at
	// once; the event waits, unpublished, until the relay continues; then the journey
	// completes with one reservation and one email.
	do(t, ctx, "pause the relay", 10*time.Second,
		chromedp.Click(chromedp.ID("demo-relay")),
		chromedp.WaitVisible(chromedp.CSS(`#demo-relay[data-paused="true"]`)))
	do(t, ctx, "order while the relay is paused", 10*time.Second, fill(1, "erin@example.com"), chromedp.Click(chromedp.ID("order-submit")))
	paused := placedOrder(t, ctx, ambiguous)
	do(t, ctx, "written while paused", 10*time.Second,
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#journey[data-order="%s"] #step-placed[data-state="done"]`, paused))))
	published := get(t, ctx, "the published step's state", chromedp.AttributeValue(chromedp.CSS("#step-published"), "data-state")).Value
	pending := testenv.Count(t, testenv.Pool(t, s.db["ordering"]), "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND state = 'pending'", paused)
	// Only conclusive while the pause still runs: what the page showed was read after the
	// relay stopped and before now.
	if !s.relayPaused(t) {
		t.Fatalf("the relay's pause of %v ended before the test looked: too short for this machine", relayPause)
	}
	if published != "waiting" || pending != 1 {
		t.Errorf("while the relay is stopped: the published step %q, %d pending outbox rows; want waiting, 1", published, pending)
	}
	watchJourney(t, ctx, paused, nil)
	do(t, ctx, "the pause over", 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#demo-relay[data-paused="false"]`)))
	do(t, ctx, "the last copy reserved", 10*time.Second, available(0))
	if d := text(t, ctx, "#step-delivered .detail"); !strings.Contains(d, "delivered 1 time(s)") {
		t.Errorf("after the relay's pause the delivered step says %q, want one delivery", d)
	}
	if n := testenv.Count(t, testenv.Pool(t, s.db["emailprovider"]), "SELECT count(*) FROM emails WHERE recipient = 'erin@example.com'"); n != 1 {
		t.Errorf("%d emails to erin@example.com, want 1", n)
	}
}

// relayPaused asks the storefront whether the relay's pause still runs.
func (s *system) relayPaused(t *testing.T) bool {
	t.Helper()
	resp, err := http.Get(s.url["storefront"] + "/api/demos/relay")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Paused bool `json:"paused"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/demos/relay: %d, %v", resp.StatusCode, err)
	}
	return r.Paused
}

// TestStorefrontCancelsAnOrderAndShowsTheReleaseAndBothEmails: order two copies and watch
// the placement's journey end with the confirmation; press Cancel and watch the journey
// continue with the compensation, each step with its time and its file: ordering's
// cancellation and its event, inventory's release and its event, the release in the
// order's history, and the second email, delivered once; the stock back where it was.
func TestStorefrontCancelsAnOrderAndShowsTheReleaseAndBothEmails(t *testing.T) {
	s := startSystem(t)
	s.setStock(t, dune, "Dune", 5)
	ctx := browser(t)

	do(t, ctx, "load the page", 20*time.Second,
		chromedp.Navigate(s.url["storefront"]),
		chromedp.WaitVisible(chromedp.ID("book-"+dune)),
		available(5))
	do(t, ctx, "order two", 10*time.Second, fill(2, "fay@example.com"), chromedp.Click(chromedp.ID("order-submit")))
	id := placedOrder(t, ctx, "")
	watchJourney(t, ctx, id, nil)
	do(t, ctx, "two copies reserved", 10*time.Second, available(3))

	do(t, ctx, "cancel", 10*time.Second,
		chromedp.WaitVisible(chromedp.ID("journey-cancel")),
		chromedp.Click(chromedp.ID("journey-cancel")),
		chromedp.WaitVisible(chromedp.CSS(`#journey[data-status="cancelled"]`)))
	watchSteps(t, ctx, id, cancelSteps, nil)
	do(t, ctx, "the copies given back", 10*time.Second, available(5))
	screenshot(t, ctx, "storefront-cancellation.png")

	for css, want := range map[string]string{
		"#step-email .detail":             "order-confirmed: completed",
		"#step-delivered .detail":         "delivered 1 time(s)",
		"#step-cancelled .detail":         "ordering.order-cancelled.v1",
		"#step-released .detail":          "2 copies given back",
		"#step-release-announced .detail": "inventory.stock-released.v1",
		"#step-cancel-email .detail":      "order-cancelled: completed",
		"#step-cancel-delivered .detail":  "delivered 1 time(s)",
	} {
		if got := text(t, ctx, css); !strings.Contains(got, want) {
			t.Errorf("%s says %q, want it to say %q", css, got, want)
		}
	}
	if hidden := get(t, ctx, "the Cancel button's visibility", chromedp.Evaluate[bool](`document.getElementById("journey-cancel").hidden`)); !hidden {
		t.Error("a cancelled order still offers Cancel")
	}
	// Two emails to the customer, each delivered once: the confirmation, then the
	// cancellation.
	rows, err := testenv.Pool(t, s.db["emailprovider"]).Query(context.Background(),
		"SELECT idempotency_key, deliveries FROM emails WHERE recipient = 'fay@example.com' ORDER BY created_at")
	if err != nil {
		t.Fatal(err)
	}
	var emails []string
	for rows.Next() {
		var key string
		var deliveries int
		if err := rows.Scan(&key, &deliveries); err != nil {
			t.Fatal(err)
		}
		emails = append(emails, fmt.Sprintf("%s x%d", key, deliveries))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"order/" + id + "/order-confirmed x1", "order/" + id + "/order-cancelled x1"}; fmt.Sprint(emails) != fmt.Sprint(want) {
		t.Errorf("emails to fay@example.com: %v, want %v", emails, want)
	}

	// The same cancellation again (a second click, a retry) is ordering's first answer
	// replayed: one order-cancelled event.
	resp, err := http.Post(s.url["storefront"]+"/api/orders/"+id+"/cancel", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	var again struct {
		Order    struct{ Status string } `json:"order"`
		Replayed bool                    `json:"replayed"`
	}
	err = json.NewDecoder(resp.Body).Decode(&again)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !again.Replayed || again.Order.Status != "cancelled" {
		t.Errorf("cancel again: %d %+v %v, want 200, the cancelled order replayed", resp.StatusCode, again, err)
	}
	if n := testenv.Count(t, testenv.Pool(t, s.db["ordering"]), "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type = 'ordering.order-cancelled.v1'", id); n != 1 {
		t.Errorf("%d order-cancelled events, want 1", n)
	}
}
