package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
)

func TestLoadProfileSetsWhatIsNotGiven(t *testing.T) {
	cfg, err := parseFlags([]string{"--profile", "load"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Doubled || cfg.Rate != loadProfile.Rate || cfg.Orders != int(loadProfile.Rate)*loadProfile.Seconds ||
		cfg.FaultsPerKind != loadProfile.FaultsPerKind || cfg.Outages != loadProfile.Outages || cfg.Prefix != "chaosload" {
		t.Errorf("profile load gave %+v", cfg)
	}
	cfg, err = parseFlags([]string{"--profile", "load", "--rate", "100", "--faults", "3", "--prefix", "mine"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != 100 || cfg.Orders != 100*loadProfile.Seconds || cfg.FaultsPerKind != 3 || cfg.Prefix != "mine" || !cfg.Doubled {
		t.Errorf("flags beside the profile: %+v", cfg)
	}
	if _, err := parseFlags([]string{"--profile", "heavy"}, io.Discard, false); err == nil {
		t.Error("an unknown profile was accepted")
	}
}

// Doubled, every service but the provider runs twice, each ordering process is an API
// with its own relay, and every relay has a RELAY_ID of its own.
func TestDoubledLayout(t *testing.T) {
	cfg := defaultConfig
	cfg.Doubled = true
	specs := cfg.layout([]string{"I=1"}, []string{"N=1"}, []string{"O=1"})
	var names []string
	relayIDs := map[string]bool{}
	for _, p := range specs {
		names = append(names, p.name)
		for _, e := range p.extra {
			if len(e) > 9 && e[:9] == "RELAY_ID=" {
				if relayIDs[e] {
					t.Errorf("%s shares %s", p.name, e)
				}
				relayIDs[e] = true
			}
		}
	}
	want := []string{"emailprovider", "inventory-1", "inventory-2", "notification-1", "notification-2", "ordering-1", "ordering-2"}
	if !slices.Equal(names, want) {
		t.Errorf("processes %v, want %v", names, want)
	}
	if len(relayIDs) != 4 {
		t.Errorf("RELAY_IDs %v, want one for each of the four relays", relayIDs)
	}
	if got := cfg.orderingAPIs(); !slices.Equal(got, []string{"ordering-1", "ordering-2"}) {
		t.Errorf("ordering APIs %v", got)
	}
	for fp, targets := range failpointProcesses(cfg) {
		for _, p := range targets {
			if !slices.Contains(names, p) {
				t.Errorf("failpoint %s targets %s, which the doubled layout does not run", fp, p)
			}
		}
		if len(targets) < 2 {
			t.Errorf("failpoint %s targets %v: want both processes of its service", fp, targets)
		}
	}
	// The default layout is the one the default run always had.
	def := defaultConfig
	if got := def.orderingAPIs(); !slices.Equal(got, []string{"ordering"}) {
		t.Errorf("default ordering APIs %v", got)
	}
	if got := failpointProcesses(def)[contracts.RelayAfterPublish]; !slices.Equal(got, []string{"inventory-1", "inventory-2", "ordering", "ordering-relay"}) {
		t.Errorf("default relays %v", got)
	}
}

// Each attempt is counted by its answer and by what was going on when it was sent; the
// drain after an outage is how long the orders placed before its end took to be decided
// and emailed.
func TestSummarizePosts(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	faults := []fault{
		{ID: 1, Kind: faultPostgresOutage, Start: at(10), End: at(20), Fired: true},
		{ID: 2, Kind: faultKill, Target: "ordering-2", Start: at(30), End: at(31), Fired: true},
		{ID: 3, Kind: faultLatency, Target: "inventory-1-postgres", Start: at(40), End: at(42), Fired: true},
		{ID: 4, Kind: faultKill, Target: "ordering-1", Start: at(50), End: at(51), Fired: false}, // missed: no window
	}
	h := []clientOp{
		{Outcome: outcomeOK, Tries: []try{{At: at(1), Took: 10 * time.Millisecond, Status: http.StatusCreated}}},
		{Outcome: outcomeFailed, Shed: 2, Tries: []try{
			{At: at(12), Took: 2 * time.Millisecond, Status: http.StatusServiceUnavailable, RetryAfter: true},
			{At: at(13), Took: 3 * time.Millisecond, Status: http.StatusServiceUnavailable, RetryAfter: true},
		}},
		{Outcome: outcomeUnknown, Tries: []try{{At: at(30.5), Took: 3 * time.Second, Timeout: true}}},
		{Outcome: outcomeOK, Tries: []try{
			{At: at(41), Took: time.Second, Status: http.StatusServiceUnavailable}, // no Retry-After
			{At: at(50.5), Took: 20 * time.Millisecond, Status: http.StatusOK},
		}},
	}
	orders := []order{
		{ID: uuid.New(), CustomerEmail: "a", Status: statusConfirmed, CreatedAt: at(9), UpdatedAt: at(25)},
		{ID: uuid.New(), CustomerEmail: "b", Status: statusRejected, CreatedAt: at(5), UpdatedAt: at(6)},
		{ID: uuid.New(), CustomerEmail: "c", Status: statusCancelled, CreatedAt: at(9), UpdatedAt: at(40)},
		{ID: uuid.New(), CustomerEmail: "d", Status: statusConfirmed, CreatedAt: at(21), UpdatedAt: at(60)},
	}
	emails := []sentEmail{
		{To: "a", IdempotencyKey: "order/x/order-confirmed", CreatedAt: at(27)},
		{To: "c", IdempotencyKey: "order/y/order-cancelled", CreatedAt: at(45)},
	}
	s := summarizePosts(start, at(100), h, faults, orders, emails)
	if s.Tries != 6 || s.Accepted != 2 || s.Shed != 2 || s.Shed503NoRA != 1 || s.Timeouts != 1 || s.Rejected != 1 {
		t.Errorf("counts: %+v", s)
	}
	phases := map[string]phaseStats{}
	for _, p := range s.Phases {
		phases[p.Phase] = p
	}
	if p := phases[phaseOutage]; p.Shed != 2 || p.Tries != 2 {
		t.Errorf("during the outage: %+v", p)
	}
	if p := phases[phaseOrdering]; p.Timeouts != 1 {
		t.Errorf("during a fault of ordering: %+v", p)
	}
	if p := phases[phaseOther]; p.Tries != 1 {
		t.Errorf("during other faults: %+v", p)
	}
	if p := phases[phaseBetween]; p.Accepted != 2 || p.AcceptedP99 != 20*time.Millisecond {
		t.Errorf("between faults: %+v", p)
	}
	if len(s.Drains) != 1 {
		t.Fatalf("drains %+v, want the outage's", s.Drains)
	}
	if d := s.Drains[0]; d.Backlog != 1 || d.Decided != 5*time.Second || d.Emailed != 7*time.Second {
		t.Errorf("drain %+v, want 1 order, decided 5s and emailed 7s after the end", d)
	}
}

// Go's transport sends a request with an Idempotency-Key again by itself when the
// kept-alive connection it went on breaks before an answer; if that second dial is
// refused, the error says "refused" though the first may have placed the order. The
// load must take such an attempt as ambiguous, not as never sent.
func TestARefusedRetryOfTheTransportIsNotANeverSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reqs atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reqs.Add(1) == 1 {
			w.WriteHeader(http.StatusCreated) // the first request keeps its connection alive
			return
		}
		// The second was received (and could have placed an order), then its connection
		// breaks and nobody listens any more: the transport's own retry is refused.
		ln.Close()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})}
	go srv.Serve(ln)
	defer srv.Close()
	cfg := defaultConfig
	cfg.Orders = 1
	l := planLoad(cfg, []uuid.UUID{uuid.New()}, []string{"http://" + ln.Addr().String()})
	ctx := context.Background()
	if a := l.postTo(ctx, l.baseURL(0), "/orders", "k", []byte(`{}`)); a.Status != http.StatusCreated {
		t.Fatalf("first: %+v", a)
	}
	a := l.postTo(ctx, l.baseURL(0), "/orders", "k", []byte(`{}`))
	if a.err == nil {
		t.Fatalf("second: no error (%d)", a.Status)
	}
	if a.refused() {
		t.Errorf("an attempt the server received counts as refused (never sent): %v", a.err)
	}
}
