package orders_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// What one order costs in round trips to Postgres, the figure that bounds POST /orders at
// low concurrency, in the fast form (pipeline.go, the default) and the plain form. The
// statements of each round trip are named as sqlc names them: the same statements, in the
// same order, in fewer round trips.
func TestPlacingAnOrderCostsTwoRoundTripsAndFiveInThePlainForm(t *testing.T) {
	const (
		lockAndLookup = "SELECT pg_try_advisory_xact_lock + GetIdempotencyKey"
		inserts       = "InsertOrder + InsertOrderLines + InsertOrderHistory"
	)
	type trip struct {
		name, key string
		replayed  bool
		want      []string
	}
	for _, form := range []struct {
		name      string
		pipelined bool
		trips     []trip
	}{
		{"fast", true, []trip{
			{"a new order with a key", "k", false, []string{"begin + " + lockAndLookup, inserts + " + InsertIdempotencyKey + InsertOutbox + commit"}},
			{"its replay", "k", true, []string{"begin + " + lockAndLookup, "commit"}},
			{"a new order without a key", "", false, []string{"begin", inserts + " + InsertOutbox + commit"}},
		}},
		{"plain", false, []trip{
			{"a new order with a key", "k", false, []string{"begin", lockAndLookup, inserts + " + InsertIdempotencyKey", "InsertOutbox", "commit"}},
			{"its replay", "k", true, []string{"begin", lockAndLookup, "commit"}},
			{"a new order without a key", "", false, []string{"begin", inserts, "InsertOutbox", "commit"}},
		}},
	} {
		t.Run(form.name, func(t *testing.T) {
			ctx := context.Background()
			pool, sent := testenv.TracedPool(t, migratedDatabase(t))
			svc := orders.NewService(pool, noop.NewTracerProvider().Tracer(""), slog.New(slog.DiscardHandler), nil, 1)
			svc.SetPipelined(form.pipelined)

			req := orders.PlaceOrderRequest{
				CustomerEmail: "ada@example.com",
				Lines:         []orders.PlaceOrderLine{{BookID: "018f2b1e-0000-7000-8000-000000000001", Quantity: 2}},
			}
			for _, key := range []string{"warm-up", "warm-up", ""} {
				if _, err := svc.PlaceOrder(ctx, key, req); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range form.trips {
				sent.Reset()
				placed, err := svc.PlaceOrder(ctx, c.key, req)
				if err != nil || placed.Replayed != c.replayed {
					t.Fatalf("%s: %v, replayed %v", c.name, err, placed.Replayed)
				}
				if got := sent.Reset(); !slices.Equal(got, c.want) {
					t.Errorf("%s: round trips\n\t%s\nwant\n\t%s", c.name, strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"))
				}
			}
		})
	}
}

// migratedDatabase returns the URL of a fresh ordering database with its migrations applied.
func migratedDatabase(t testing.TB) string {
	t.Helper()
	admin, dbURL := testenv.Database(t, "ordering")
	migrated, err := pgdb.Open(context.Background(), admin, dbURL, orders.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	return dbURL
}

// recorder is an EventWriter that writes nothing into the transaction and records the
// events it is told have committed.
type recorder struct{ committed []string }

func (r *recorder) Write(_ context.Context, _ pgx.Tx, e outbox.Event) (event.Envelope, error) {
	return event.New(e.Source, e.Type, e.AggregateID, e.Sequence, e.Data)
}

func (r *recorder) Committed(_ context.Context, env event.Envelope) {
	r.committed = append(r.committed, env.Type+"#"+env.Sequence)
}

// The service hands each change's event to its EventWriter, and calls Committed once per
// committed change: never for a replay or a refused request. The outbox gets only what the
// writer writes, here nothing.
func TestAnEventWriterHearsOfEachCommittedChangeOnce(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t, migratedDatabase(t))
	events := &recorder{}
	svc := orders.NewService(pool, noop.NewTracerProvider().Tracer(""), slog.New(slog.DiscardHandler), events, 1)

	req := orders.PlaceOrderRequest{
		CustomerEmail: "ada@example.com",
		Lines:         []orders.PlaceOrderLine{{BookID: "018f2b1e-0000-7000-8000-000000000001", Quantity: 1}},
	}
	var placed orders.Answer
	for _, key := range []string{"place", "place"} {
		a, err := svc.PlaceOrder(ctx, key, req)
		if err != nil {
			t.Fatal(err)
		}
		placed = a
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
	if rows, err := svc.OrderEvents(ctx, id); err != nil || len(rows) != 0 {
		t.Errorf("outbox rows of the order: %v, %v; want none", rows, err)
	}
}
