package stock_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// The migration from ordering.order-placed.v1 to v2 (docs/schema-evolution.md): while
// producers switch, inventory reads both versions into one order and reserves it the same
// way, and an order is answered once whichever version, or both, brings it.

// orderPlacedV2 is the v2 event of a new order, as ordering writes it with
// ORDERING_ORDER_PLACED_VERSION=2.
func orderPlacedV2(t testing.TB, lines ...contracts.Line) event.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	env, err := event.New("bookstore/ordering", contracts.OrderPlacedV2, id.String(), 1, contracts.OrderPlacedV2Data{
		OrderID: id, Customer: contracts.Customer{Email: "ada@example.com"}, Lines: lines, PlacedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// asV2 is the v2 event of v1's order, under a new message id: what a producer that
// switched versions and then published the same order again would send.
func asV2(t testing.TB, v1 event.Envelope) event.Envelope {
	t.Helper()
	var d contracts.OrderPlacedData
	if err := json.Unmarshal(v1.Data, &d); err != nil {
		t.Fatal(err)
	}
	env, err := event.New(v1.Source, contracts.OrderPlacedV2, v1.Subject, 1, contracts.OrderPlacedV2Data{
		OrderID: d.OrderID, Customer: contracts.Customer{Email: d.CustomerEmail}, Lines: d.Lines, PlacedAt: d.PlacedAt,
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// The same order as v1 and as v2 gives the same reservation and an outcome event with the
// same data, one message at a time and in a batch that mixes the versions.
func TestBothVersionsOfOrderPlacedReserveTheSameWay(t *testing.T) {
	t.Parallel()
	lines := []contracts.Line{{BookID: dune, Quantity: 2}, {BookID: neuromancer, Quantity: 1}}
	outcomeData := func(t *testing.T, pool *pgxpool.Pool, env event.Envelope) map[string]any {
		t.Helper()
		evs := outcomes(t, pool, env.Subject)
		if len(evs) != 1 || evs[0].Type != contracts.StockReserved {
			t.Fatalf("order %s (%s): outcomes %v, want one %s", env.Subject, env.Type, typesOf(evs), contracts.StockReserved)
		}
		var d map[string]any
		if err := json.Unmarshal(evs[0].Data, &d); err != nil {
			t.Fatal(err)
		}
		delete(d, "order_id")
		return d
	}
	t.Run("one at a time", func(t *testing.T) {
		t.Parallel()
		pool := database(t, 4)
		svc := service(t, pool)
		v1, v2 := orderPlaced(t, lines...), orderPlacedV2(t, lines...)
		for _, env := range []event.Envelope{v1, v2} {
			if _, err := svc.HandleOrderEvent(context.Background(), env); err != nil {
				t.Fatalf("%s: %v", env.Type, err)
			}
		}
		if d, n := reserved(t, pool, dune), reserved(t, pool, neuromancer); d != 4 || n != 2 {
			t.Errorf("reserved Dune %d, Neuromancer %d: want 4 and 2 (two orders, one per version)", d, n)
		}
		if a, b := outcomeData(t, pool, v1), outcomeData(t, pool, v2); !equalJSON(t, a, b) {
			t.Errorf("outcome data of v1's order %v, of v2's %v: want the same", a, b)
		}
	})
	t.Run("in one batch", func(t *testing.T) {
		t.Parallel()
		pool := database(t, 4)
		svc := service(t, pool)
		envs := []event.Envelope{orderPlaced(t, lines...), orderPlacedV2(t, lines...), orderPlaced(t, lines...), orderPlacedV2(t, lines...)}
		if _, err := svc.HandleOrderEvents(context.Background(), batchOf(envs...)); err != nil {
			t.Fatal(err)
		}
		if d, n := reserved(t, pool, dune), reserved(t, pool, neuromancer); d != 8 || n != 4 {
			t.Errorf("reserved Dune %d, Neuromancer %d: want 8 and 4", d, n)
		}
		for _, env := range envs[1:] {
			if a, b := outcomeData(t, pool, envs[0]), outcomeData(t, pool, env); !equalJSON(t, a, b) {
				t.Errorf("outcome data of %s %v, of v1 %v: want the same", env.Type, b, a)
			}
		}
	})
}

// The same order once as v1 and once as v2, two message ids: the inbox takes both, and the
// order_answers table's key lets only the first answer it, in either order of arrival.
func TestSameOrderAsV1AndAsV2IsAnsweredOnce(t *testing.T) {
	t.Parallel()
	for name, v1First := range map[string]bool{"v1 then v2": true, "v2 then v1": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := database(t, 4)
			svc := service(t, pool)
			v1 := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
			v2 := asV2(t, v1)
			first, second := v1, v2
			if !v1First {
				first, second = v2, v1
			}
			if o, err := svc.HandleOrderEvent(context.Background(), first); err != nil || o != inbox.Processed {
				t.Fatalf("%s: outcome %v, err %v, want processed", first.Type, o, err)
			}
			o, err := svc.HandleOrderEvent(context.Background(), second)
			if err != nil {
				t.Fatalf("%s: %v", second.Type, err)
			}
			if o != inbox.Duplicate {
				t.Errorf("%s of an order answered under %s: %v, want a duplicate", second.Type, first.Type, o)
			}
			if n := reserved(t, pool, dune); n != 2 {
				t.Errorf("Dune reserved = %d, want 2", n)
			}
			if evs := outcomes(t, pool, v1.Subject); len(evs) != 1 {
				t.Errorf("outcome events = %d, want 1", len(evs))
			}
			if n := testenv.Count(t, pool, "SELECT count(*) FROM order_answers"); n != 1 {
				t.Errorf("order_answers rows = %d, want 1", n)
			}
			if n := testenv.Count(t, pool, "SELECT count(DISTINCT event_type) FROM inbox"); n != 2 {
				t.Errorf("inbox rows of %d event types, want 2: both messages recorded as handled", n)
			}
		})
	}
}

// A v2 without its required customer.email, or in v1's shape, and a v1 in v2's shape, are
// poison (invalid-data); a version inventory does not read is unknown-type. None changes
// anything. A v2 with the optional customer.name is an order like any other.
func TestOrderPlacedVersionsAreReadStrictly(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	v2 := orderPlacedV2(t, contracts.Line{BookID: dune, Quantity: 1})
	withTypeAndData := func(typ, data string) event.Envelope {
		e := v2
		e.ID, e.Type, e.Data = uuid.Must(uuid.NewV7()).String(), typ, json.RawMessage(data)
		return e
	}
	order, line := v2.Subject, `[{"book_id": "`+dune.String()+`", "quantity": 1}]`
	rest := `"order_id": "` + order + `", "lines": ` + line + `, "placed_at": "2026-11-29T21:00:00Z"`
	cases := map[string]struct {
		env    event.Envelope
		reason string
	}{
		"v2 without customer":         {withTypeAndData(contracts.OrderPlacedV2, `{`+rest+`}`), event.ReasonInvalidData},
		"v2 without customer.email":   {withTypeAndData(contracts.OrderPlacedV2, `{"customer": {"name": "Ada"}, `+rest+`}`), event.ReasonInvalidData},
		"v2 in v1's shape":            {withTypeAndData(contracts.OrderPlacedV2, `{"customer_email": "ada@example.com", `+rest+`}`), event.ReasonInvalidData},
		"v2 with an unknown field":    {withTypeAndData(contracts.OrderPlacedV2, `{"customer": {"email": "ada@example.com", "phone": "1"}, `+rest+`}`), event.ReasonInvalidData},
		"v1 in v2's shape":            {withTypeAndData(contracts.OrderPlaced, `{"customer": {"email": "ada@example.com"}, `+rest+`}`), event.ReasonInvalidData},
		"a version inventory lacks":   {withTypeAndData("ordering.order-placed.v3", `{"customer": {"email": "ada@example.com"}, `+rest+`}`), event.ReasonUnknownType},
		"v2 with a line out of range": {withTypeAndData(contracts.OrderPlacedV2, `{"customer": {"email": "ada@example.com"}, "order_id": "`+order+`", "lines": [{"book_id": "`+dune.String()+`", "quantity": 0}], "placed_at": "2026-11-29T21:00:00Z"}`), event.ReasonInvalidData},
	}
	for name, c := range cases {
		if _, err := svc.HandleOrderEvent(context.Background(), c.env); !isPoison(err, c.reason) {
			t.Errorf("%s: err = %v, want poison %s", name, err, c.reason)
		}
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM inbox") + testenv.Count(t, pool, "SELECT count(*) FROM outbox") + reserved(t, pool, dune); n != 0 {
		t.Errorf("poison changed the database (inbox + outbox rows + Dune reserved = %d)", n)
	}
	named := withTypeAndData(contracts.OrderPlacedV2, `{"customer": {"email": "ada@example.com", "name": "Ada"}, `+rest+`}`)
	if _, err := svc.HandleOrderEvent(context.Background(), named); err != nil {
		t.Fatalf("v2 with customer.name: %v", err)
	}
	if n := reserved(t, pool, dune); n != 1 {
		t.Errorf("Dune reserved = %d after a v2 with a name, want 1", n)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
