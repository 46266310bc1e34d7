package stock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// orderCancelled is the OrderCancelled of placed's order, at sequence seq (2 for a
// pending order, 3 for a confirmed one), under a message id of its own.
func orderCancelled(t testing.TB, placed event.Envelope, seq int64) event.Envelope {
	t.Helper()
	env, err := event.New("bookstore/ordering", contracts.OrderCancelled, placed.Subject, seq, contracts.OrderCancelledData{
		OrderID: uuid.MustParse(placed.Subject), CustomerEmail: "ada@example.com", CancelledAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// released returns the StockReleased events of an order in inventory's outbox.
func releasedEvents(t testing.TB, pool *pgxpool.Pool, orderID string) []event.Envelope {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT envelope FROM outbox WHERE aggregate_id = $1 AND event_type = $2 ORDER BY sequence", orderID, contracts.StockReleased)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []event.Envelope
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			t.Fatal(err)
		}
		env, err := event.Decode(body, contracts.StockReleased)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

func releasedLines(t testing.TB, env event.Envelope) []contracts.Line {
	t.Helper()
	var d contracts.StockReleasedData
	if err := env.DecodeData(&d); err != nil {
		t.Fatal(err)
	}
	return d.Lines
}

func handle(t testing.TB, svc *stock.Service, env event.Envelope) inbox.Outcome {
	t.Helper()
	out, err := svc.HandleOrderEvent(context.Background(), env)
	if err != nil {
		t.Fatalf("%s: %v", env.Type, err)
	}
	return out
}

// A cancellation after the placement gives back the reserved copies and announces them
// once: its redelivery is a duplicate (the inbox), the same cancellation under another
// message id is stale (its sequence is not above the order's last), and neither changes
// the stock again.
func TestCancellationReleasesTheReservationOnce(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	before := reserved(t, pool, dune)
	placed := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2}, contracts.Line{BookID: neuromancer, Quantity: 1})
	handle(t, svc, placed)
	if got := reserved(t, pool, dune); got != before+2 {
		t.Fatalf("after the placement: Dune reserved %d, want %d", got, before+2)
	}
	cancel := orderCancelled(t, placed, 3)
	if got := handle(t, svc, cancel); got != inbox.Processed {
		t.Fatalf("cancellation: %v", got)
	}
	if got := handle(t, svc, cancel); got != inbox.Duplicate {
		t.Errorf("its redelivery: %v, want duplicate", got)
	}
	if got := handle(t, svc, orderCancelled(t, placed, 3)); got != inbox.Duplicate {
		t.Errorf("the same cancellation under another message id: %v, want duplicate", got)
	}
	if got := reserved(t, pool, dune); got != before {
		t.Errorf("Dune reserved %d, want %d (given back once)", got, before)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM reservations WHERE order_id = $1", uuid.MustParse(placed.Subject)); n != 0 {
		t.Errorf("%d reservations left for the cancelled order", n)
	}
	rel := releasedEvents(t, pool, placed.Subject)
	if len(rel) != 1 || rel[0].Sequence != "2" || len(releasedLines(t, rel[0])) != 2 {
		t.Fatalf("StockReleased events %v, want one at sequence 2 with both lines", rel)
	}
}

// The cancellation overtakes its placement: it writes the order's tombstone and a
// StockReleased with no lines (sequence 1, the reservation's first event), and the
// placement, arriving later, alone or in a batch, reserves nothing and announces nothing.
func TestCancellationBeforeItsPlacementReservesNothing(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	before := reserved(t, pool, dune)
	placed := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})

	if got := handle(t, svc, orderCancelled(t, placed, 2)); got != inbox.Processed {
		t.Fatalf("cancellation first: %v", got)
	}
	if _, err := svc.HandleOrderEvents(context.Background(), batchOf(placed)); err == nil {
		t.Fatal("a batch with the cancelled order's placement committed")
	}
	if got := handle(t, svc, placed); got != inbox.Duplicate {
		t.Errorf("the placement after its cancellation: %v, want duplicate", got)
	}
	if got := reserved(t, pool, dune); got != before {
		t.Errorf("Dune reserved %d, want %d: stock reserved for a cancelled order", got, before)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type <> $2", placed.Subject, contracts.StockReleased); n != 0 {
		t.Errorf("%d outcome events for a cancelled order, want 0", n)
	}
	rel := releasedEvents(t, pool, placed.Subject)
	if len(rel) != 1 || rel[0].Sequence != "1" || len(releasedLines(t, rel[0])) != 0 {
		t.Errorf("StockReleased events %v, want one at sequence 1 with no lines", rel)
	}
}

// A rejected order holds nothing: its cancellation releases nothing and says so.
func TestCancellationOfARejectedOrderReleasesNothing(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	before := reserved(t, pool, hyperion)
	placed := orderPlaced(t, contracts.Line{BookID: hyperion, Quantity: 4}) // 3 on hand
	handle(t, svc, placed)
	handle(t, svc, orderCancelled(t, placed, 3))
	if got := reserved(t, pool, hyperion); got != before {
		t.Errorf("Hyperion reserved %d, want %d", got, before)
	}
	rel := releasedEvents(t, pool, placed.Subject)
	if len(rel) != 1 || rel[0].Sequence != "2" || len(releasedLines(t, rel[0])) != 0 {
		t.Errorf("StockReleased events %v, want one at sequence 2 with no lines", rel)
	}
}

// Ten copies of one cancellation at once, each on a connection of its own: one
// releases, the others wait on its inbox row and skip.
func TestTenCopiesOfACancellationAtOnceReleaseOnce(t *testing.T) {
	t.Parallel()
	const copies = 10
	pool := database(t, copies)
	svc := service(t, pool)
	before := reserved(t, pool, dune)
	placed := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 3})
	handle(t, svc, placed)
	cancel := orderCancelled(t, placed, 2)

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[inbox.Outcome]int{}
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := svc.HandleOrderEvent(context.Background(), cancel)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[out]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if got[inbox.Processed] != 1 || got[inbox.Duplicate] != copies-1 {
		t.Errorf("outcomes %v, want 1 processed and %d duplicates", got, copies-1)
	}
	if r := reserved(t, pool, dune); r != before {
		t.Errorf("Dune reserved %d, want %d", r, before)
	}
	if n := len(releasedEvents(t, pool, cancel.Subject)); n != 1 {
		t.Errorf("%d StockReleased, want 1", n)
	}
}

// Placements and cancellations of the same orders handled at the same moment, on
// connections of their own, as two workers of the consumer would: whichever reaches the
// order's row first, the other decides on what it committed. At the end no copy is
// reserved for any of the orders, each has one StockReleased, and an order whose
// placement was applied first had its copies given back.
func TestPlacementAndCancellationAtOnceLeaveNothingReserved(t *testing.T) {
	t.Parallel()
	const orders = 15
	pool := database(t, 2*orders)
	svc := service(t, pool)
	before := reserved(t, pool, neuromancer)

	placements := make([]event.Envelope, orders)
	for i := range placements {
		placements[i] = orderPlaced(t, contracts.Line{BookID: neuromancer, Quantity: 1})
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range placements {
		for _, env := range []event.Envelope{p, orderCancelled(t, p, 2)} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := svc.HandleOrderEvent(context.Background(), env); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()

	if got := reserved(t, pool, neuromancer); got != before {
		t.Errorf("Neuromancer reserved %d, want %d: copies kept for cancelled orders", got, before)
	}
	placedFirst := 0
	for _, p := range placements {
		rel := releasedEvents(t, pool, p.Subject)
		if len(rel) != 1 {
			t.Fatalf("order %s: %d StockReleased, want 1", p.Subject, len(rel))
		}
		reservedEvents := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type = $2", p.Subject, contracts.StockReserved)
		if reservedEvents == 1 {
			placedFirst++
		}
		if want := reservedEvents; len(releasedLines(t, rel[0])) != want {
			t.Errorf("order %s: released %v after %d reservations", p.Subject, releasedLines(t, rel[0]), reservedEvents)
		}
	}
	t.Logf("placement first for %d of %d orders, cancellation first for the rest", placedFirst, orders)
}

// The failure window of the tombstone: it must outlive every copy of the placement it
// stands against. Were the order's row ever forgotten (a retention sweep of
// order_answers, which inventory does not have for this reason) while a copy of the
// placement was still to come (a DLQ replay, days later), that copy would reserve stock
// for a cancelled order, and nothing would ever give it back.
func TestAForgottenTombstoneLetsALatePlacementReserveForACancelledOrder(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	before := reserved(t, pool, dune)
	placed := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	handle(t, svc, orderCancelled(t, placed, 2))

	// Forgotten as retention sweeps would forget them: the order's row, and its published
	// StockReleased (the outbox cleanup deletes published rows).
	if _, err := pool.Exec(context.Background(), "DELETE FROM order_answers WHERE order_id = $1", uuid.MustParse(placed.Subject)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), "DELETE FROM outbox WHERE aggregate_id = $1", placed.Subject); err != nil {
		t.Fatal(err)
	}
	if got := handle(t, svc, placed); got != inbox.Processed {
		t.Fatalf("late placement: %v", got)
	}
	if got := reserved(t, pool, dune); got != before+1 {
		t.Fatalf("Dune reserved %d: the window did not open", got)
	}
	t.Logf("with its tombstone forgotten, the cancelled order %s holds 1 copy of Dune for ever", placed.Subject)
}

// Poison: a cancellation whose data or sequence cannot be an ordering's.
func TestInvalidCancellationsArePoison(t *testing.T) {
	t.Parallel()
	pool := database(t, 2)
	svc := service(t, pool)
	placed := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	first := orderCancelled(t, placed, 1)
	other := orderCancelled(t, placed, 2)
	other.Subject = uuid.NewString()
	for name, env := range map[string]event.Envelope{"sequence 1": first, "subject not the order": other} {
		if _, err := svc.HandleOrderEvent(context.Background(), env); !isPoison(err, event.ReasonInvalidData) {
			t.Errorf("%s: %v, want invalid-data poison", name, err)
		}
	}
}
