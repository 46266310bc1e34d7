package wrongways_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each wrong way shown failing where it fails. These tests assert the defect: that is
// what the wrong ways are for.

// dune is the seeded book the tests order (10 on hand).
var dune = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")

// database opens a fresh, migrated and seeded inventory database.
func database(t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin, dbURL := testenv.Database(t, "inventory")
	pool, err := pgdb.Open(context.Background(), admin, dbURL, stock.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// wrongWay is a Consumer on pool that takes the ways opts names.
func wrongWay(t *testing.T, pool *pgxpool.Pool, opts wrongways.Options) *wrongways.Consumer {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "inventory-test", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := stock.NewService(pool, tel, stock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := wrongways.New(pool, tel, svc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// orderPlaced is the OrderPlaced of a new order of quantity copies of Dune.
func orderPlaced(t *testing.T, quantity int) event.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	env, err := event.New("bookstore/ordering", contracts.OrderPlaced, id.String(), 1, contracts.OrderPlacedData{
		OrderID: id, CustomerEmail: "ada@example.com", Lines: []contracts.Line{{BookID: dune, Quantity: quantity}}, PlacedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// orderCancelled is the OrderCancelled of placed's pending order (sequence 2).
func orderCancelled(t *testing.T, placed event.Envelope) event.Envelope {
	t.Helper()
	env, err := event.New("bookstore/ordering", contracts.OrderCancelled, placed.Subject, 2, contracts.OrderCancelledData{
		OrderID: uuid.MustParse(placed.Subject), CustomerEmail: "ada@example.com", CancelledAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func duneReserved(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT reserved FROM book_stock WHERE id = $1", dune).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func handle(t *testing.T, c *wrongways.Consumer, env event.Envelope) inbox.Outcome {
	t.Helper()
	out, err := c.HandleOrderEvent(context.Background(), env)
	if err != nil {
		t.Fatalf("%s: %v", env.Type, err)
	}
	return out
}

func TestNaiveReservesAgainOnEveryDelivery(t *testing.T) {
	t.Parallel()
	pool := database(t)
	naive := wrongWay(t, pool, wrongways.Options{Strategy: wrongways.Naive})
	msg := orderPlaced(t, 2)
	for range 3 {
		if o := handle(t, naive, msg); o != inbox.Processed {
			t.Fatalf("HandleOrderEvent = %v", o)
		}
	}
	if n := duneReserved(t, pool); n != 6 {
		t.Errorf("Dune reserved = %d after three deliveries of an order of 2, want 6 (naive's defect)", n)
	}
	// Each delivery announced the order again, as the next event of its reservation.
	rows, err := pool.Query(context.Background(), "SELECT sequence FROM outbox WHERE aggregate_id = $1 ORDER BY sequence", msg.Subject)
	if err != nil {
		t.Fatal(err)
	}
	sequences, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sequences, []int64{1, 2, 3}) {
		t.Errorf("outcome events at sequences %v, want 3 with sequences 1..3", sequences)
	}
}

// check-then-process survives a plain redelivery (which is why it passes a happy-path
// test) and fails two copies at once: both check before either records.
func TestCheckThenProcessLetsTwoConcurrentCopiesThrough(t *testing.T) {
	t.Parallel()
	pool := database(t)
	msg := orderPlaced(t, 2)
	plain := wrongWay(t, pool, wrongways.Options{Strategy: wrongways.CheckThenProcess})
	for range 2 {
		handle(t, plain, msg)
	}
	if n := duneReserved(t, pool); n != 2 {
		t.Fatalf("sequential redelivery: Dune reserved = %d, want 2", n)
	}

	// Two copies of a second order: each holds after its work commits, until both have
	// passed the check.
	msg2 := orderPlaced(t, 2)
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	racing := wrongWay(t, pool, wrongways.Options{Strategy: wrongways.CheckThenProcess, Hooks: wrongways.Hooks{AfterCommit: func(ctx context.Context) error {
		arrived.Done()
		select {
		case <-both:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the other copy never got past the check")
		}
	}}})
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := racing.HandleOrderEvent(context.Background(), msg2); errs <- err }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := duneReserved(t, pool); n != 6 {
		t.Errorf("Dune reserved = %d, want 6: 2 for the first order and 4 for the second, reserved by both copies", n)
	}
}

// INVENTORY_CANCELLATIONS=ignore-sequence, the design the chaos comparison must catch:
// the cancellation that overtakes its placement keeps no tombstone, and the placement
// reserves for a cancelled order.
func TestIgnoringTheSequenceReservesForACancelledOrder(t *testing.T) {
	t.Parallel()
	pool := database(t)
	c := wrongWay(t, pool, wrongways.Options{Strategy: wrongways.Inbox, IgnoreSequence: true})
	before := duneReserved(t, pool)
	placed := orderPlaced(t, 1)
	handle(t, c, orderCancelled(t, placed))
	if got := handle(t, c, placed); got != inbox.Processed {
		t.Fatalf("late placement: %v", got)
	}
	if got := duneReserved(t, pool); got != before+1 {
		t.Errorf("Dune reserved %d, want %d: the wrong design should leak", got, before+1)
	}
}
