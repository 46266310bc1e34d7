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
	"github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// What one order costs in round trips to Postgres, the figure that bounds POST /orders at
// low concurrency. The statements of each round trip are named as sqlc names them.
func TestPlacingAnOrderCostsFiveRoundTripsAndAReplayThree(t *testing.T) {
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "ordering")
	migrated, err := pgdb.Open(ctx, admin, dbURL,
		pgdb.Migrations{FS: sql.Platform, VersionTable: "goose_platform_version"},
		pgdb.Migrations{FS: sql.Ordering, VersionTable: "goose_ordering_version"})
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	pool, sent := testenv.TracedPool(t, dbURL)
	svc := orders.NewService(pool, noop.NewTracerProvider().Tracer(""), slog.New(slog.DiscardHandler), nil, 1)

	req := orders.PlaceOrderRequest{
		CustomerEmail: "ada@example.com",
		Lines:         []orders.PlaceOrderLine{{BookID: "018f2b1e-0000-7000-8000-000000000001", Quantity: 2}},
	}
	for _, key := range []string{"warm-up", "warm-up", ""} {
		if _, err := svc.PlaceOrder(ctx, key, req); err != nil {
			t.Fatal(err)
		}
	}

	const (
		lockAndLookup = "SELECT pg_try_advisory_xact_lock + GetIdempotencyKey"
		inserts       = "InsertOrder + InsertOrderLines + InsertOrderHistory"
	)
	for _, c := range []struct {
		name, key string
		replayed  bool
		want      []string
	}{
		{"a new order with a key", "k", false, []string{"begin", lockAndLookup, inserts + " + InsertIdempotencyKey", "InsertOutbox", "commit"}},
		{"its replay", "k", true, []string{"begin", lockAndLookup, "commit"}},
		{"a new order without a key", "", false, []string{"begin", inserts, "InsertOutbox", "commit"}},
	} {
		sent.Reset()
		placed, err := svc.PlaceOrder(ctx, c.key, req)
		if err != nil || placed.Replayed != c.replayed {
			t.Fatalf("%s: %v, replayed %v", c.name, err, placed.Replayed)
		}
		if got := sent.Reset(); !slices.Equal(got, c.want) {
			t.Errorf("%s: round trips\n\t%s\nwant\n\t%s", c.name, strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"))
		}
	}
}
