package orders_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each test here runs against both forms of PlaceOrder, the fast one (pipeline.go) and
// the plain one (answerOnce), and wants the same answers and the same rows of both.

// form is one form of PlaceOrder on a database of its own.
type form struct {
	name string
	svc  *orders.Service
	db   *pgxpool.Pool // the service's pool
}

// forms returns the fast and the plain form, in this order, each on a fresh database
// with a pool of conns connections that registers pgdb's types, as production's does.
func forms(t testing.TB, conns int32) []form {
	t.Helper()
	return []form{newForm(t, "fast", true, true, conns), newForm(t, "plain", false, true, conns)}
}

// newForm returns PlaceOrder in the fast form or the plain one, on a fresh database with
// a pool of conns connections, which registers pgdb's types or not.
func newForm(t testing.TB, name string, pipelined, registerTypes bool, conns int32) form {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(migratedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	if registerTypes {
		cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error { // as pgdb.Open's pool
			pgdb.RegisterTypes(conn.TypeMap())
			return nil
		}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	svc := orders.NewService(pool, noop.NewTracerProvider().Tracer(""), slog.New(slog.DiscardHandler), 1)
	svc.SetPipelined(pipelined)
	return form{name, svc, pool}
}

func orderOf(email string, quantity int) orders.PlaceOrderRequest {
	return orders.PlaceOrderRequest{
		CustomerEmail: email,
		Lines:         []orders.PlaceOrderLine{{BookID: "018f2b1e-0000-7000-8000-000000000001", Quantity: quantity}},
	}
}

// rows counts what placing orders leaves in each table, in the order of tables.
func rows(t *testing.T, db *pgxpool.Pool) [4]int {
	t.Helper()
	var n [4]int
	for i, table := range tables {
		n[i] = testenv.Count(t, db, "SELECT count(*) FROM "+table)
	}
	return n
}

var tables = [4]string{"orders", "order_lines", "outbox", "idempotency_keys"}

func TestBothFormsAnswerANewOrderItsReplayAndAReusedKeyAlike(t *testing.T) {
	ctx := context.Background()
	for _, f := range forms(t, 1) {
		t.Run(f.name, func(t *testing.T) {
			first, err := f.svc.PlaceOrder(ctx, "key-1", orderOf("ada@example.com", 2))
			if err != nil || first.Replayed {
				t.Fatalf("a new order: %v, replayed %v", err, first.Replayed)
			}
			stored, err := f.svc.GetOrder(ctx, first.Order.ID)
			if err != nil || !sameOrder(stored, first.Order) {
				t.Errorf("GET of the new order: %+v, %v; want %+v", stored, err, first.Order)
			}
			events, err := f.svc.OrderEvents(ctx, first.Order.ID)
			if err != nil || len(events) != 1 || events[0].Type != contracts.OrderPlaced {
				t.Errorf("the new order's events: %+v, %v; want one %s", events, err, contracts.OrderPlaced)
			}

			again, err := f.svc.PlaceOrder(ctx, "key-1", orderOf("ada@example.com", 2))
			if err != nil || !again.Replayed || string(again.Body) != string(first.Body) || again.Order.ID != first.Order.ID {
				t.Errorf("the replay: %v, replayed %v, %s; want the first body %s", err, again.Replayed, again.Body, first.Body)
			}
			if _, err := f.svc.PlaceOrder(ctx, "key-1", orderOf("ada@example.com", 3)); !errors.Is(err, orders.ErrKeyMismatch) {
				t.Errorf("the same key with another body: %v, want ErrKeyMismatch", err)
			}
			keyless, err := f.svc.PlaceOrder(ctx, "", orderOf("grace@example.com", 1))
			if err != nil || keyless.Replayed || keyless.Order.ID == first.Order.ID {
				t.Errorf("an order without a key: %v, replayed %v", err, keyless.Replayed)
			}
			if got, want := rows(t, f.db), [4]int{2, 2, 2, 1}; got != want {
				t.Errorf("rows of %v: %v, want %v", tables, got, want)
			}
		})
	}
}

// sameOrder compares what GET shows of an order with what POST answered.
func sameOrder(a, b orders.Order) bool {
	return a.ID == b.ID && a.CustomerEmail == b.CustomerEmail && a.Status == b.Status &&
		a.CreatedAt.Equal(b.CreatedAt) && len(a.Lines) == len(b.Lines) && a.Lines[0] == b.Lines[0] &&
		len(a.History) == 1 && a.History[0].At.Equal(b.History[0].At)
}

func TestBothFormsPlaceOneOrderForConcurrentCopiesOfOneKey(t *testing.T) {
	ctx := context.Background()
	for _, f := range forms(t, 4) {
		t.Run(f.name, func(t *testing.T) {
			const n = 20
			var wg sync.WaitGroup
			var mu sync.Mutex
			placed, replayed, inFlight := 0, 0, 0
			start := make(chan struct{})
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					a, err := f.svc.PlaceOrder(ctx, "same-key", orderOf("grace@example.com", 1))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case errors.Is(err, orders.ErrKeyInFlight):
						inFlight++
					case err != nil:
						t.Errorf("a copy: %v", err)
					case a.Replayed:
						replayed++
					default:
						placed++
					}
				}()
			}
			close(start)
			wg.Wait()
			t.Logf("placed %d, replayed %d, in flight %d", placed, replayed, inFlight)
			if placed != 1 || placed+replayed+inFlight != n {
				t.Errorf("placed %d, replayed %d, in flight %d; want exactly one placed of %d", placed, replayed, inFlight, n)
			}
			if got, want := rows(t, f.db), [4]int{1, 1, 1, 1}; got != want {
				t.Errorf("rows of %v: %v, want %v", tables, got, want)
			}
		})
	}
}

// The failpoint ordering/before-commit fires after every value is decided and before
// the commit: the error leaves no row behind, and the retry with the same key places the
// order. Not parallel: failpoints are the process's.
func TestBothFormsLeaveNothingWhenTheFailpointBeforeCommitFires(t *testing.T) {
	ctx := context.Background()
	for _, f := range forms(t, 1) {
		t.Run(f.name, func(t *testing.T) {
			if err := failpoint.Configure(contracts.OrderingBeforeCommit+"=error", contracts.Failpoints); err != nil {
				t.Fatal(err)
			}
			_, err := f.svc.PlaceOrder(ctx, "key-1", orderOf("ada@example.com", 2))
			_ = failpoint.Configure("", contracts.Failpoints)
			if !errors.Is(err, failpoint.ErrInjected) {
				t.Fatalf("PlaceOrder at the failpoint: %v, want ErrInjected", err)
			}
			if got := rows(t, f.db); got != [4]int{} {
				t.Errorf("rows of %v after the failpoint: %v, want none", tables, got)
			}
			wantConnectionKept(t, f, "key-1")
		})
	}
}

// A statement of the transaction's last batch fails (here the outbox insert, after the
// order's own inserts): none of the batch is committed, and the connection goes back to
// the pool usable, not in an aborted transaction.
func TestBothFormsCommitNothingWhenAnInsertFails(t *testing.T) {
	ctx := context.Background()
	for _, f := range forms(t, 1) {
		t.Run(f.name, func(t *testing.T) {
			admin := testenv.Pool(t, f.db.Config().ConnString())
			for _, sql := range []string{
				`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'outbox refused'; END $$`,
				`CREATE TRIGGER refuse BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()`,
			} {
				if _, err := admin.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			for _, key := range []string{"key-1", ""} {
				if _, err := f.svc.PlaceOrder(ctx, key, orderOf("ada@example.com", 2)); err == nil {
					t.Fatalf("PlaceOrder with key %q and the outbox refusing rows: no error", key)
				}
			}
			if got := rows(t, admin); got != [4]int{} {
				t.Errorf("rows of %v after the failed insert: %v, want none", tables, got)
			}
			if _, err := admin.Exec(ctx, "DROP TRIGGER refuse ON outbox"); err != nil {
				t.Fatal(err)
			}
			wantConnectionKept(t, f, "key-1")
		})
	}
}

// wantConnectionKept places the order of key on f's pool of one connection and wants it
// placed on the one connection the pool ever made: the failure before left it outside a
// transaction, so the pool kept it instead of closing it.
func wantConnectionKept(t *testing.T, f form, key string) {
	t.Helper()
	placed, err := f.svc.PlaceOrder(context.Background(), key, orderOf("ada@example.com", 2))
	if err != nil || placed.Replayed {
		t.Fatalf("the retry: %v, replayed %v; want a new order", err, placed.Replayed)
	}
	if got := rows(t, f.db); got != [4]int{1, 1, 1, 1} {
		t.Errorf("rows of %v after the retry: %v, want one of each", tables, got)
	}
	if n := f.db.Stat().NewConnsCount(); n != 1 {
		t.Errorf("the pool made %d connections, want 1: the failure lost its connection", n)
	}
}
