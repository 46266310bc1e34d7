package wrongways_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/ordering/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// recorder is an Events that writes nothing into the transaction and records the events
// it is told have committed.
type recorder struct{ committed []string }

func (r *recorder) InTx(context.Context, pgx.Tx, event.Envelope) error { return nil }

func (r *recorder) Committed(_ context.Context, env event.Envelope) error {
	r.committed = append(r.committed, env.Type+"#"+env.Sequence)
	return nil
}

// A wrong way hears of each committed change once, never of a replay or a refused
// request, and the outbox gets nothing: the order's events are the Events' alone.
func TestAWrongWayHearsOfEachCommittedChangeOnceAndWritesNoOutboxRow(t *testing.T) {
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "ordering")
	pool, err := pgdb.Open(ctx, admin, dbURL,
		pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"},
		pgdb.Migrations{FS: schema.Ordering, VersionTable: "goose_ordering_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	log := slog.New(slog.DiscardHandler)
	events := &recorder{}
	svc := wrongways.NewOrders(orders.NewService(pool, noop.NewTracerProvider().Tracer(""), log, 1), pool, events, 1, log)

	req := orders.PlaceOrderRequest{
		CustomerEmail: "ada@example.com",
		Lines:         []orders.PlaceOrderLine{{BookID: "018f2b1e-0000-7000-8000-000000000001", Quantity: 1}},
	}
	var placed orders.Answer
	for _, key := range []string{"place", "place"} {
		if placed, err = svc.PlaceOrder(ctx, key, req); err != nil {
			t.Fatal(err)
		}
	}
	id := placed.Order.ID
	for _, key := range []string{"cancel", "cancel"} {
		if _, err := svc.CancelOrder(ctx, key, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.CancelOrder(ctx, "", id); !errors.As(err, &orders.NotCancellableError{}) {
		t.Fatalf("a third cancel: %v, want NotCancellableError", err)
	}

	want := []string{contracts.OrderPlaced + "#1", contracts.OrderCancelled + "#2"}
	if !slices.Equal(events.committed, want) {
		t.Errorf("committed %v, want %v", events.committed, want)
	}
	if got, err := svc.GetOrder(ctx, id); err != nil || got.Status != orders.Cancelled || len(got.History) != 2 {
		t.Errorf("GetOrder: %+v, %v; want cancelled after placed", got, err)
	}
	if rows, err := svc.OrderEvents(ctx, id); err != nil || len(rows) != 0 {
		t.Errorf("outbox rows of the order: %v, %v; want none", rows, err)
	}
}
