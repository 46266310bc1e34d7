package e2e

import (
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
)

// The migration of docs/schema-evolution.md, on the whole system: inventory already reads
// ordering.order-placed v1 and v2 (step 1); ordering switches to v2 as a rolling deploy,
// a v2 instance started beside the v1 one, then the v1 instance stopped (step 2); v1 has
// drained when ordering's outbox holds no unpublished v1 row and inventory's queue is
// empty (step 3). Every order, whichever version announced it, is confirmed and emailed
// once.
func TestOrderingSwitchesToOrderPlacedV2WhileTheSystemRuns(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	dune := bookID(1)
	s.setStock(dune, "Dune", 10)

	settle := func(email string) string {
		t.Helper()
		o := s.placeOrder(email, line{dune, 1})
		if got := s.settled(o.ID, 30*time.Second); got.Status != "confirmed" {
			t.Fatalf("order %s is %s, want confirmed", o.ID, got.Status)
		}
		return o.ID
	}
	first := settle("v1@example.com") // ordering writes v1, its default

	v1 := s.procs["ordering"]
	v2 := sut.StartProcess(t, testenv.Build(t, "github.com/bookstore-go/bookstore/services/ordering/cmd/ordering"), nil, map[string]string{
		"DATABASE_URL": s.DB["ordering"], "DATABASE_ADMIN_URL": testenv.AdminURL(), "AMQP_URL": s.AMQPURL,
		"LOG_LEVEL": "info", "ORDERING_ORDER_PLACED_VERSION": "2",
	})
	s.URL["ordering"] = v2.Base
	second := settle("v2@example.com") // v2 written while a v1 instance still runs
	v1.Stop(t)
	third := settle("v2@example.com") // every producer on v2

	ordering, inventory := testenv.Pool(t, s.DB["ordering"]), testenv.Pool(t, s.DB["inventory"])
	for id, want := range map[string]int{first: 1, second: 2, third: 2} {
		if got := testenv.Count(t, ordering, "SELECT schema_version FROM outbox WHERE aggregate_id = $1", id); got != want {
			t.Errorf("order %s: outbox schema_version %d, want %d", id, got, want)
		}
	}
	// v1 has drained: nothing left to publish, nothing left to consume.
	if n := testenv.Count(t, ordering, "SELECT count(*) FROM outbox WHERE event_type = $1 AND state <> 'published'", contracts.OrderPlaced); n != 0 {
		t.Errorf("%d v1 outbox rows not published", n)
	}
	if n := testenv.QueueDepth(t, s.AMQPURL, contracts.QueueInventoryOrderPlaced); n != 0 {
		t.Errorf("%d messages left on %s", n, contracts.QueueInventoryOrderPlaced)
	}
	for typ, want := range map[string]int{contracts.OrderPlaced: 1, contracts.OrderPlacedV2: 2} {
		if n := testenv.Count(t, inventory, "SELECT count(*) FROM inbox WHERE event_type = $1", typ); n != want {
			t.Errorf("inventory handled %d %s, want %d", n, typ, want)
		}
	}
	if b := s.book(dune); b.Reserved != 3 {
		t.Errorf("Dune reserved %d, want 3", b.Reserved)
	}
	for id, address := range map[string]string{first: "v1@example.com", second: "v2@example.com"} {
		if _, emails := s.emailed(id, address); len(emails) == 0 || emails[0].Deliveries != 1 {
			t.Errorf("emails to %s: %+v", address, emails)
		}
	}
	if _, emails := s.emailed(third, "v2@example.com"); len(emails) != 2 {
		t.Errorf("emails to v2@example.com: %d, want 2 (one per order)", len(emails))
	}
}
