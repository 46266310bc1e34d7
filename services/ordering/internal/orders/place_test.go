package orders_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
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
			svc := orders.NewService(pool, noop.NewTracerProvider().Tracer(""), slog.New(slog.DiscardHandler), 1)
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
