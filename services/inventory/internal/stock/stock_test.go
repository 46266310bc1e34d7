package stock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// Seeded books the tests order: Dune (10 on hand), Hyperion (3), Neuromancer (1000).
var (
	dune        = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")
	neuromancer = uuid.MustParse("018f2b1e-0000-7000-8000-000000000003")
	hyperion    = uuid.MustParse("018f2b1e-0000-7000-8000-000000000005")
)

// database opens a fresh, migrated and seeded inventory database. connections sets the
// pool size, so that concurrent handlers really hold transactions at the same time.
func database(t testing.TB, connections int) *pgxpool.Pool {
	t.Helper()
	admin, dbURL := testenv.Database(t, "inventory")
	pool, err := pgdb.Open(context.Background(), admin, fmt.Sprintf("%s&pool_max_conns=%d", dbURL, connections), stock.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func service(t testing.TB, pool *pgxpool.Pool) *stock.Service {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "inventory-test", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := stock.NewService(pool, tel, stock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func orderPlaced(t testing.TB, lines ...contracts.Line) event.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	env, err := event.New("bookstore/ordering", contracts.OrderPlaced, id.String(), 1, contracts.OrderPlacedData{
		OrderID: id, CustomerEmail: "ada@example.com", Lines: lines, PlacedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func reserved(t testing.TB, pool *pgxpool.Pool, book uuid.UUID) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT reserved FROM book_stock WHERE id = $1", book).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// outcomes returns the outcome events in the outbox for an order, oldest first.
func outcomes(t testing.TB, pool *pgxpool.Pool, orderID string) []event.Envelope {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT envelope FROM outbox WHERE aggregate_id = $1 ORDER BY sequence", orderID)
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
		env, err := event.Decode(body, contracts.StockReserved, contracts.StockRejected)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// 20 copies of one message arrive at once (20 consumers, one redelivery storm), each on
// a connection of its own. Exactly one reserves; the other 19 wait on its inbox row and
// skip. (Twenty, not more: make test runs other packages against the same Postgres, and
// its max_connections is 100.)
func TestTwentyCopiesAtOnceReserveOnce(t *testing.T) {
	t.Parallel()
	const copies = 20
	pool := database(t, copies)
	svc := service(t, pool)
	msg := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2}, contracts.Line{BookID: neuromancer, Quantity: 1})

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[inbox.Outcome]int{}
	var errs []error
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o, err := svc.HandleOrderEvent(context.Background(), msg)
			mu.Lock()
			defer mu.Unlock()
			got[o]++
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d copies failed, first: %v", len(errs), errs[0])
	}
	if got[inbox.Processed] != 1 || got[inbox.Duplicate] != copies-1 {
		t.Errorf("outcomes = %v, want 1 processed and %d duplicates", got, copies-1)
	}
	if n := reserved(t, pool, dune); n != 2 {
		t.Errorf("Dune reserved = %d, want 2", n)
	}
	if n := reserved(t, pool, neuromancer); n != 1 {
		t.Errorf("Neuromancer reserved = %d, want 1", n)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM reservations"); n != 2 {
		t.Errorf("reservation rows = %d, want 2 (one per line)", n)
	}
	if evs := outcomes(t, pool, msg.Subject); len(evs) != 1 || evs[0].Type != contracts.StockReserved {
		t.Errorf("outcome events = %v, want one %s", typesOf(evs), contracts.StockReserved)
	}
}

func typesOf(evs []event.Envelope) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// The reserved event carries the order, as the contracts say, from inventory as source,
// about the order's reservation.
func TestReservedEventCarriesTheOrder(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	lines := []contracts.Line{{BookID: neuromancer, Quantity: 3}, {BookID: dune, Quantity: 1}}
	msg := orderPlaced(t, lines...)
	if o, err := svc.HandleOrderEvent(context.Background(), msg); err != nil || o != inbox.Processed {
		t.Fatalf("HandleOrderEvent = %v, %v", o, err)
	}
	evs := outcomes(t, pool, msg.Subject)
	if len(evs) != 1 {
		t.Fatalf("%d outcome events, want 1", len(evs))
	}
	e := evs[0]
	if e.Type != contracts.StockReserved || e.Source != stock.Source || e.Subject != msg.Subject || e.Sequence != "1" {
		t.Errorf("envelope = type %s source %s subject %s sequence %s", e.Type, e.Source, e.Subject, e.Sequence)
	}
	var data contracts.StockReservedData
	if err := e.DecodeData(&data); err != nil {
		t.Fatal(err)
	}
	if data.OrderID.String() != msg.Subject || data.CustomerEmail != "ada@example.com" || len(data.Lines) != 2 ||
		data.Lines[0] != lines[0] || data.Lines[1] != lines[1] {
		t.Errorf("data = %+v, want the order's id, email and lines in the order's order", data)
	}
	var aggType, aggID string
	if err := pool.QueryRow(context.Background(), "SELECT aggregate_type, aggregate_id FROM outbox").Scan(&aggType, &aggID); err != nil {
		t.Fatal(err)
	}
	if aggType != stock.AggregateType || aggID != msg.Subject {
		t.Errorf("outbox aggregate = %s/%s, want %s/%s", aggType, aggID, stock.AggregateType, msg.Subject)
	}
}

// An order reserves all its lines or none: one line short rejects the whole order and
// reserves nothing, not even the lines that would fit.
func TestOneShortLineRejectsTheWholeOrder(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	msg := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2}, contracts.Line{BookID: hyperion, Quantity: 4})
	if o, err := svc.HandleOrderEvent(context.Background(), msg); err != nil || o != inbox.Processed {
		t.Fatalf("HandleOrderEvent = %v, %v", o, err)
	}
	if d, h := reserved(t, pool, dune), reserved(t, pool, hyperion); d != 0 || h != 0 {
		t.Errorf("reserved Dune %d, Hyperion %d: want 0 and 0", d, h)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM reservations"); n != 0 {
		t.Errorf("reservation rows = %d, want 0", n)
	}
	evs := outcomes(t, pool, msg.Subject)
	if len(evs) != 1 || evs[0].Type != contracts.StockRejected {
		t.Fatalf("outcome events = %v, want one %s", typesOf(evs), contracts.StockRejected)
	}
	var data contracts.StockRejectedData
	if err := evs[0].DecodeData(&data); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(data.Reason, "insufficient stock for "+hyperion.String()) || len(data.Lines) != 2 {
		t.Errorf("rejection = %+v, want the reason to name Hyperion and the order's two lines", data)
	}
}

// A book inventory does not know rejects the order; it is not a broken message.
func TestUnknownBookRejectsTheOrder(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	unknown := uuid.Must(uuid.NewV7())
	msg := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1}, contracts.Line{BookID: unknown, Quantity: 1})
	if o, err := svc.HandleOrderEvent(context.Background(), msg); err != nil || o != inbox.Processed {
		t.Fatalf("HandleOrderEvent = %v, %v; want processed (a rejection), not poison", o, err)
	}
	evs := outcomes(t, pool, msg.Subject)
	if len(evs) != 1 || evs[0].Type != contracts.StockRejected {
		t.Fatalf("outcome events = %v, want one %s", typesOf(evs), contracts.StockRejected)
	}
	var data contracts.StockRejectedData
	if err := evs[0].DecodeData(&data); err != nil {
		t.Fatal(err)
	}
	if data.Reason != "unknown book "+unknown.String() {
		t.Errorf("reason = %q, want %q", data.Reason, "unknown book "+unknown.String())
	}
	if n := reserved(t, pool, dune); n != 0 {
		t.Errorf("Dune reserved = %d, want 0", n)
	}
}

// Many orders racing for a scarce book: exactly as many are reserved as there are
// copies, the rest rejected, and reserved never passes on_hand.
func TestRacingOrdersNeverOversell(t *testing.T) {
	t.Parallel()
	pool := database(t, 12)
	svc := service(t, pool)
	const orders = 12 // Hyperion has 3 copies
	var wg sync.WaitGroup
	errs := make(chan error, orders)
	for range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := svc.HandleOrderEvent(context.Background(), orderPlaced(t, contracts.Line{BookID: hyperion, Quantity: 1}))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := reserved(t, pool, hyperion); n != 3 {
		t.Errorf("Hyperion reserved = %d, want 3 (all its copies, no more)", n)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE event_type = $1", contracts.StockReserved); n != 3 {
		t.Errorf("reserved events = %d, want 3", n)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox WHERE event_type = $1", contracts.StockRejected); n != orders-3 {
		t.Errorf("rejected events = %d, want %d", n, orders-3)
	}
}

// Orders that list the same two books in opposite orders, all at once. Had each locked
// its lines in the order it listed them, two of them would each hold a book the other
// needs: Postgres would abort one with a deadlock error. Locks in book id order never
// form that cycle.
func TestOppositeLineOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pool := database(t, 20)
	svc := service(t, pool)
	const orders = 40
	var wg sync.WaitGroup
	errs := make(chan error, orders)
	for i := range orders {
		lines := []contracts.Line{{BookID: dune, Quantity: 1}, {BookID: neuromancer, Quantity: 1}}
		if i%2 == 1 {
			lines[0], lines[1] = lines[1], lines[0]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Dune's 10 copies run out after 10 orders; every order still takes both locks.
			_, err := svc.HandleOrderEvent(context.Background(), orderPlaced(t, lines...))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("an order failed (a deadlock would show here): %v", err)
		}
	}
	if d, n := reserved(t, pool, dune), reserved(t, pool, neuromancer); d != 10 || n != 10 {
		t.Errorf("reserved Dune %d, Neuromancer %d: want 10 and 10 (the 10 orders Dune could serve)", d, n)
	}
}

// The same order under a second message id (a producer that re-sent it with a new id):
// the inbox cannot know, the order_answers table's key can. Nothing is reserved twice
// and no second outcome is announced, for a reserved order and a rejected one alike.
func TestSameOrderUnderANewMessageIDIsNotReservedTwice(t *testing.T) {
	for name, qty := range map[string]int{"reserved": 2, "rejected": 11} {
		t.Run(name, func(t *testing.T) { sameOrderTwice(t, qty) })
	}
}

func sameOrderTwice(t *testing.T, qty int) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	first := orderPlaced(t, contracts.Line{BookID: dune, Quantity: qty})
	second := first
	second.ID = uuid.Must(uuid.NewV7()).String()
	for _, msg := range []event.Envelope{first, second} {
		if _, err := svc.HandleOrderEvent(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	if want := map[bool]int{true: 2, false: 0}[qty <= 10]; reserved(t, pool, dune) != want {
		t.Errorf("Dune reserved = %d, want %d", reserved(t, pool, dune), want)
	}
	if evs := outcomes(t, pool, first.Subject); len(evs) != 1 {
		t.Errorf("outcome events = %d, want 1", len(evs))
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM inbox"); n != 2 {
		t.Errorf("inbox rows = %d, want 2: both message ids are recorded as handled", n)
	}
}

// Events no retry can fix are poison, and change nothing.
func TestInvalidOrdersArePoison(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	valid := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
	withData := func(data string) event.Envelope {
		e := valid
		e.ID = uuid.Must(uuid.NewV7()).String()
		e.Data = json.RawMessage(data)
		return e
	}
	order := valid.Subject
	line := `{"book_id": "` + dune.String() + `", "quantity": 1}`
	cases := map[string]event.Envelope{
		"data is not an object":    withData(`[1, 2]`),
		"unknown field":            withData(`{"order_id": "` + order + `", "customer_email": "a@b.c", "lines": [` + line + `], "placed_at": "2026-11-29T21:00:00Z", "coupon": "X"}`),
		"order id is not subject":  withData(`{"order_id": "` + uuid.NewString() + `", "customer_email": "a@b.c", "lines": [` + line + `], "placed_at": "2026-11-29T21:00:00Z"}`),
		"no lines":                 withData(`{"order_id": "` + order + `", "customer_email": "a@b.c", "lines": [], "placed_at": "2026-11-29T21:00:00Z"}`),
		"zero quantity":            withData(`{"order_id": "` + order + `", "customer_email": "a@b.c", "lines": [{"book_id": "` + dune.String() + `", "quantity": 0}], "placed_at": "2026-11-29T21:00:00Z"}`),
		"the same book twice":      withData(`{"order_id": "` + order + `", "customer_email": "a@b.c", "lines": [` + line + `, ` + line + `], "placed_at": "2026-11-29T21:00:00Z"}`),
		"no customer email":        withData(`{"order_id": "` + order + `", "lines": [` + line + `], "placed_at": "2026-11-29T21:00:00Z"}`),
		"quantity above contracts": withData(`{"order_id": "` + order + `", "customer_email": "a@b.c", "lines": [{"book_id": "` + dune.String() + `", "quantity": 101}], "placed_at": "2026-11-29T21:00:00Z"}`),
	}
	for name, msg := range cases {
		_, err := svc.HandleOrderEvent(context.Background(), msg)
		if reason, ok := event.IsPoison(err); !ok || reason != event.ReasonInvalidData {
			t.Errorf("%s: err = %v, want poison %s", name, err, event.ReasonInvalidData)
		}
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM inbox") + testenv.Count(t, pool, "SELECT count(*) FROM outbox") + reserved(t, pool, dune); n != 0 {
		t.Errorf("poison changed the database (inbox + outbox rows + Dune reserved = %d)", n)
	}
	// The same id again with different content is poison of its own kind.
	if _, err := svc.HandleOrderEvent(context.Background(), valid); err != nil {
		t.Fatal(err)
	}
	altered := valid
	altered.Data = json.RawMessage(strings.Replace(string(valid.Data), `"quantity":1`, `"quantity":2`, 1))
	if _, err := svc.HandleOrderEvent(context.Background(), altered); !isPoison(err, event.ReasonContentMismatch) {
		t.Errorf("same id, different content: err = %v, want poison %s", err, event.ReasonContentMismatch)
	}
}

func isPoison(err error, reason string) bool {
	r, ok := event.IsPoison(err)
	return ok && r == reason
}
