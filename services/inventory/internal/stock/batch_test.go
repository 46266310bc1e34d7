package stock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// sut is the system under test, as testenv's helpers see it.
var sut = testenv.System{
	Topology:  contracts.Topology,
	Contracts: apitest.Checker{}, // every event published against api/
}

// More seeded books: The Left Hand of Darkness (5 on hand), The Dispossessed (4), Solaris (5).
var (
	leftHand     = uuid.MustParse("018f2b1e-0000-7000-8000-000000000002")
	dispossessed = uuid.MustParse("018f2b1e-0000-7000-8000-000000000006")
	solaris      = uuid.MustParse("018f2b1e-0000-7000-8000-000000000009")
)

// batchOf makes the consumer's messages of envs, each with a span of a trace of its own,
// as the consumer gives them to a batch handler.
func batchOf(envs ...event.Envelope) []inbox.Message {
	msgs := make([]inbox.Message, len(envs))
	for i, env := range envs {
		var tid trace.TraceID
		var sid trace.SpanID
		_, _ = rand.Read(tid[:])
		_, _ = rand.Read(sid[:])
		msgs[i] = inbox.Message{Envelope: env, Span: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
		})}
	}
	return msgs
}

// written is what a reservation leaves in the inventory database, in rows per table and
// copies reserved per book.
type written struct {
	inbox, outbox, reservations, answers int
	reserved                             map[uuid.UUID]int
}

func writtenIn(t testing.TB, pool *pgxpool.Pool) written {
	t.Helper()
	w := written{
		inbox:        testenv.Count(t, pool, "SELECT count(*) FROM inbox"),
		outbox:       testenv.Count(t, pool, "SELECT count(*) FROM outbox"),
		reservations: testenv.Count(t, pool, "SELECT count(*) FROM reservations"),
		answers:      testenv.Count(t, pool, "SELECT count(*) FROM order_answers"),
		reserved:     map[uuid.UUID]int{},
	}
	rows, err := pool.Query(context.Background(), "SELECT id, reserved FROM book_stock")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		w.reserved[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w written) String() string {
	return fmt.Sprintf("inbox %d, outbox %d, reservations %d, answers %d, reserved %v", w.inbox, w.outbox, w.reservations, w.answers, w.reserved)
}

func (w written) equal(o written) bool {
	return w.inbox == o.inbox && w.outbox == o.outbox && w.reservations == o.reservations && w.answers == o.answers &&
		fmt.Sprint(w.reserved) == fmt.Sprint(o.reserved)
}

// A book with 5 copies and a batch of 8 one-copy orders: the first 5 are reserved and the
// last 3 rejected for insufficient stock, as the same orders one after another would be.
// Each order has one answer, one outbox event continuing its own message's trace, and
// each message one inbox row.
func TestBatchReservesWhatTheSameOrdersOneAtATimeWould(t *testing.T) {
	t.Parallel()
	pool := database(t, 4)
	svc := service(t, pool)
	envs := make([]event.Envelope, 8)
	for i := range envs {
		envs[i] = orderPlaced(t, contracts.Line{BookID: leftHand, Quantity: 1})
	}
	msgs := batchOf(envs...)
	got, err := svc.HandleOrderEvents(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Repeat([]inbox.Outcome{inbox.Processed}, len(envs)); !slices.Equal(got, want) {
		t.Errorf("outcomes = %v, want %v", got, want)
	}

	if n := reserved(t, pool, leftHand); n != 5 {
		t.Errorf("Left Hand reserved = %d, want 5 (all its copies, no more)", n)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM reservations"); n != 5 {
		t.Errorf("reservation rows = %d, want 5", n)
	}
	for i, env := range envs {
		wantType, wantAnswer := contracts.StockReserved, "reserved"
		if i >= 5 {
			wantType, wantAnswer = contracts.StockRejected, "rejected"
		}
		evs := outcomes(t, pool, env.Subject)
		if len(evs) != 1 || evs[0].Type != wantType {
			t.Errorf("order %d: outcome events = %v, want one %s", i, typesOf(evs), wantType)
			continue
		}
		if wantType == contracts.StockRejected {
			var data contracts.StockRejectedData
			if err := evs[0].DecodeData(&data); err != nil {
				t.Fatal(err)
			}
			if want := "insufficient stock for " + leftHand.String() + ": 0 available, 1 wanted"; data.Reason != want {
				t.Errorf("order %d: reason = %q, want %q", i, data.Reason, want)
			}
		}
		var answer string
		if err := pool.QueryRow(context.Background(), "SELECT outcome FROM order_answers WHERE order_id = $1", env.Subject).Scan(&answer); err != nil {
			t.Errorf("order %d: answer: %v", i, err)
		} else if answer != wantAnswer {
			t.Errorf("order %d: answer = %s, want %s", i, answer, wantAnswer)
		}
		reservations := testenv.Count(t, pool, "SELECT count(*) FROM reservations WHERE order_id = $1", env.Subject)
		if want := map[bool]int{true: 1, false: 0}[i < 5]; reservations != want {
			t.Errorf("order %d: %d reservation rows, want %d", i, reservations, want)
		}
		var traceparent string
		if err := pool.QueryRow(context.Background(), "SELECT traceparent FROM outbox WHERE aggregate_id = $1", env.Subject).Scan(&traceparent); err != nil {
			t.Fatal(err)
		}
		if tid := msgs[i].Span.TraceID().String(); !strings.Contains(traceparent, tid) {
			t.Errorf("order %d: outbox traceparent %q does not continue its message's trace %s", i, traceparent, tid)
		}
		if n := testenv.Count(t, pool, "SELECT count(*) FROM inbox WHERE message_id = $1 AND consumer = $2", env.ID, stock.ConsumerName); n != 1 {
			t.Errorf("message %d: %d inbox rows, want 1", i, n)
		}
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM inbox"); n != len(envs) {
		t.Errorf("inbox rows = %d, want %d", n, len(envs))
	}
}

// Orders of several lines over scarce books, some of them unknown, reserved in one batch
// on one database and one after another on another: both databases end the same, book
// by book, reservation by reservation, answer by answer and event by event.
func TestBatchDecidesAsTheSameOrdersOneAfterAnotherWould(t *testing.T) {
	t.Parallel()
	books := []uuid.UUID{hyperion, leftHand, dispossessed, dune, uuid.MustParse("018f2b1e-0000-7000-8000-0000000000ff")}
	rnd := mrand.New(mrand.NewPCG(7, 11))
	envs := make([]event.Envelope, 16)
	for i := range envs {
		var lines []contracts.Line
		for _, j := range rnd.Perm(len(books))[:1+rnd.IntN(3)] {
			lines = append(lines, contracts.Line{BookID: books[j], Quantity: 1 + rnd.IntN(3)})
		}
		envs[i] = orderPlaced(t, lines...)
	}

	batched, alone := database(t, 4), database(t, 4)
	if _, err := service(t, batched).HandleOrderEvents(context.Background(), batchOf(envs...)); err != nil {
		t.Fatal(err)
	}
	one := service(t, alone)
	for _, env := range envs {
		if o, err := one.HandleOrderEvent(context.Background(), env); err != nil || o != inbox.Processed {
			t.Fatalf("HandleOrderEvent = %v, %v", o, err)
		}
	}

	for _, q := range []string{
		"SELECT id::text, reserved FROM book_stock ORDER BY id",
		"SELECT order_id::text, book_id::text, quantity FROM reservations ORDER BY order_id, book_id",
		"SELECT order_id::text, outcome FROM order_answers ORDER BY order_id",
		"SELECT aggregate_type, aggregate_id, sequence, event_type, schema_version, envelope::json->>'data' FROM outbox ORDER BY aggregate_id",
		"SELECT message_id::text, consumer, content_hash, event_type FROM inbox ORDER BY message_id",
	} {
		b, a := rowsOf(t, batched, q), rowsOf(t, alone, q)
		if !slices.Equal(b, a) {
			t.Errorf("%s\nbatch:         %v\none at a time: %v", q, b, a)
		}
	}
	if n := testenv.Count(t, batched, "SELECT count(*) FROM order_answers WHERE outcome = 'rejected'"); n == 0 || n == len(envs) {
		t.Errorf("%d of %d orders rejected: the orders should test both answers", n, len(envs))
	}
}

// rowsOf returns every row of a query, each formatted as one string.
func rowsOf(t testing.TB, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(vals...))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A batch that holds a copy of a message processed before, or two copies of one new
// message, returns inbox.ErrNotAllNew and writes nothing at all: no reservation, no
// answer, no outbox row, no inbox row of its other messages. One at a time, as the
// consumer then hands them, the copy is a duplicate and the others are reserved.
func TestBatchHoldingAMessageSeenBeforeWritesNothing(t *testing.T) {
	for name, before := range map[string]bool{"processed before": true, "twice in the batch": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := database(t, 4)
			svc := service(t, pool)
			ctx := context.Background()
			seen := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1})
			first := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
			last := orderPlaced(t, contracts.Line{BookID: neuromancer, Quantity: 1})
			batch := []event.Envelope{first, seen, last}
			if before {
				if o, err := svc.HandleOrderEvent(ctx, seen); err != nil || o != inbox.Processed {
					t.Fatalf("HandleOrderEvent = %v, %v", o, err)
				}
			} else {
				batch = append(batch, seen)
			}
			was := writtenIn(t, pool)

			got, err := svc.HandleOrderEvents(ctx, batchOf(batch...))
			if !errors.Is(err, inbox.ErrNotAllNew) || got != nil {
				t.Fatalf("HandleOrderEvents = %v, %v; want inbox.ErrNotAllNew", got, err)
			}
			if is := writtenIn(t, pool); !is.equal(was) {
				t.Errorf("the refused batch wrote: before %v; after %v", was, is)
			}

			want := []inbox.Outcome{inbox.Processed, inbox.Processed, inbox.Processed}
			if before {
				want[1] = inbox.Duplicate
			} else {
				want = append(want, inbox.Duplicate)
			}
			for i, env := range batch {
				if o, err := svc.HandleOrderEvent(ctx, env); err != nil || o != want[i] {
					t.Errorf("message %d alone: HandleOrderEvent = %v, %v; want %v", i, o, err, want[i])
				}
			}
			if d, n := reserved(t, pool, dune), reserved(t, pool, neuromancer); d != 3 || n != 1 {
				t.Errorf("reserved Dune %d, Neuromancer %d: want 3 and 1", d, n)
			}
			if n := testenv.Count(t, pool, "SELECT count(*) FROM outbox"); n != 3 {
				t.Errorf("outbox rows = %d, want 3", n)
			}
		})
	}
}

// A batch that holds an order answered before under another message id (a producer that
// sent it again with a new id), whether it was reserved or rejected then, and whether or
// not the relay has since published its outcome event and deleted the row, or the same
// order twice under two ids, returns an error and writes nothing. One at a time, the
// order's second message is a duplicate and changes nothing.
func TestBatchHoldingAnOrderAnsweredBeforeUnderAnotherIDWritesNothing(t *testing.T) {
	for _, c := range []struct {
		name    string
		qty     int  // of Dune, which has 10
		before  bool // the order was answered before the batch
		cleaned bool // and its outcome event published and deleted since (outbox retention)
	}{
		{"reserved before", 2, true, false},
		{"rejected before", 11, true, false},
		{"reserved before, event cleaned up", 2, true, true},
		{"rejected before, event cleaned up", 11, true, true},
		{"twice in the batch", 2, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := database(t, 4)
			svc := service(t, pool)
			ctx := context.Background()
			order := orderPlaced(t, contracts.Line{BookID: dune, Quantity: c.qty})
			again := order
			again.ID = uuid.Must(uuid.NewV7()).String()
			first := orderPlaced(t, contracts.Line{BookID: neuromancer, Quantity: 1})
			last := orderPlaced(t, contracts.Line{BookID: hyperion, Quantity: 1})
			batch := []event.Envelope{first, again, last}
			if c.before {
				if o, err := svc.HandleOrderEvent(ctx, order); err != nil || o != inbox.Processed {
					t.Fatalf("HandleOrderEvent = %v, %v", o, err)
				}
				if c.cleaned {
					// The relay deletes published rows after its retention; order_answers
					// keeps the answer.
					if _, err := pool.Exec(ctx, "DELETE FROM outbox"); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				batch = slices.Insert(batch, 1, order)
			}
			was := writtenIn(t, pool)

			got, err := svc.HandleOrderEvents(ctx, batchOf(batch...))
			if err == nil || errors.Is(err, inbox.ErrNotAllNew) || got != nil {
				t.Fatalf("HandleOrderEvents = %v, %v; want the error of an order answered before", got, err)
			}
			if is := writtenIn(t, pool); !is.equal(was) {
				t.Errorf("the refused batch wrote: before %v; after %v", was, is)
			}

			for _, env := range batch {
				want := inbox.Processed
				if env.ID == again.ID {
					want = inbox.Duplicate
				}
				if o, err := svc.HandleOrderEvent(ctx, env); err != nil || o != want {
					t.Errorf("message %s alone: HandleOrderEvent = %v, %v; want %v", env.ID, o, err, want)
				}
			}
			wantDune := map[bool]int{true: c.qty, false: 0}[c.qty <= 10]
			if d, n, h := reserved(t, pool, dune), reserved(t, pool, neuromancer), reserved(t, pool, hyperion); d != wantDune || n != 1 || h != 1 {
				t.Errorf("reserved Dune %d, Neuromancer %d, Hyperion %d: want %d, 1 and 1", d, n, h, wantDune)
			}
			if evs, want := outcomes(t, pool, order.Subject), map[bool]int{true: 0, false: 1}[c.cleaned]; len(evs) != want {
				t.Errorf("the order has %d outcome events, want %d: it was announced again", len(evs), want)
			}
			if n := testenv.Count(t, pool, "SELECT count(*) FROM order_answers"); n != 3 {
				t.Errorf("answers = %d, want 3", n)
			}
		})
	}
}

// The real consumer with batches and four workers takes orders for scarce books, every
// message published twice, some orders also under a second message id; the first copies
// of the orders' first messages wait in the queue, everything else comes from three
// publishers at once while the consumer works. Every order is answered
// exactly once, with one event that says what its answer says; a reserved order has all
// its lines reserved and a rejected one none; no book has more reserved than on hand, and
// its reserved count is the sum of its reservations.
func TestBatchedConsumerReservesEachOrderOnceWhenEveryMessageArrivesTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := database(t, 8) // four workers' transactions, their health checks and the test's queries
	amqpURL := testenv.VHost(t)
	svc := service(t, pool)

	const orders, resent = 80, 10
	books := []uuid.UUID{hyperion, leftHand, dispossessed, solaris, dune}
	rnd := mrand.New(mrand.NewPCG(3, 5))
	envs := make([]event.Envelope, 0, orders+resent)
	lines := map[string][]contracts.Line{} // by order id
	for range orders {
		var ls []contracts.Line
		for _, j := range rnd.Perm(len(books))[:1+rnd.IntN(2)] {
			ls = append(ls, contracts.Line{BookID: books[j], Quantity: 1 + rnd.IntN(2)})
		}
		env := orderPlaced(t, ls...)
		envs = append(envs, env)
		lines[env.Subject] = ls
	}
	for _, env := range envs[:resent] {
		env.ID = uuid.Must(uuid.NewV7()).String()
		envs = append(envs, env)
	}
	shuffled := func(envs ...event.Envelope) []broker.Message {
		msgs := make([]broker.Message, len(envs))
		for i, env := range envs {
			m, err := broker.EventMessage(env, "ordering")
			if err != nil {
				t.Fatal(err)
			}
			msgs[i] = m
		}
		rnd.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
		return msgs
	}
	// The first copies of the orders' first messages wait in the queue, so that the
	// consumer starts on full batches of new messages; everything else, the orders'
	// second messages twice, comes while it works.
	sut.Publish(t, amqpURL, shuffled(envs[:orders]...)...)

	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "inventory-test", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tel.Metrics)
	t.Cleanup(srv.Close)
	conn := broker.NewConn(amqpURL, "inventory-test")
	c, err := consumer.New(conn, tel, consumer.Config{
		Name: stock.ConsumerName, Queue: contracts.QueueInventoryOrderPlaced, Topology: contracts.Topology, Types: stock.OrderEventTypes,
		Concurrency: 4, Batch: svc.HandleOrderEvents, Healthy: pool.Ping, Producer: testenv.Login(amqpURL),
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
	}, svc.HandleOrderEvent)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = c.Run(cctx) }()
	t.Cleanup(func() { cancel(); <-stopped; conn.Close() })

	second := shuffled(slices.Concat(envs, envs[orders:])...)
	t.Run("publish the second copies", func(t *testing.T) {
		for i := range 3 {
			part := second[i*len(second)/3 : (i+1)*len(second)/3]
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				sut.Publish(t, amqpURL, part...)
			})
		}
	})

	metric := func(name string) float64 {
		return testenv.Metric(t, srv.URL, name, `consumer="inventory"`)
	}
	total := 2 * len(envs)
	testenv.Eventually(t, 120*time.Second, "every delivery acked", func() bool {
		return metric("bookstore_consumer_processed_total")+metric("bookstore_consumer_duplicates_total") >= float64(total) &&
			testenv.QueueDepth(t, amqpURL, contracts.QueueInventoryOrderPlaced) == 0
	})
	if n := testenv.QueueDepth(t, amqpURL, contracts.QueueInventoryOrderPlaced+".dlq"); n != 0 {
		t.Errorf("DLQ holds %d messages, want 0", n)
	}
	if got := metric("bookstore_consumer_processed_total"); got != orders {
		t.Errorf("consumer processed %v messages, want one per order, %d; the others are duplicates", got, orders)
	}
	if got := metric("bookstore_consumer_batch_size_count"); got == 0 {
		t.Error("no batch was committed: the test did not exercise HandleOrderEvents")
	}
	t.Logf("%v batches committed holding %v messages; %v batches fell back; processed %v, duplicates %v",
		metric("bookstore_consumer_batch_size_count"), metric("bookstore_consumer_batch_size_sum"),
		metric("bookstore_consumer_batch_fallbacks_total"),
		metric("bookstore_consumer_processed_total"), metric("bookstore_consumer_duplicates_total"))

	// Every order answered once, announced once, as answered.
	answers := map[string]string{}
	for _, r := range rowsOf(t, pool, "SELECT order_id::text || ' ' || outcome FROM order_answers") {
		id, outcome, _ := strings.Cut(r, " ")
		answers[id] = outcome
	}
	if len(answers) != orders {
		t.Errorf("%d orders answered, want %d", len(answers), orders)
	}
	events := map[string][]string{}
	for _, r := range rowsOf(t, pool, "SELECT aggregate_id || ' ' || event_type FROM outbox") {
		id, typ, _ := strings.Cut(r, " ")
		events[id] = append(events[id], typ)
	}
	reservedLines := map[string]map[uuid.UUID]int{}
	rows, err := pool.Query(ctx, "SELECT order_id::text, book_id, quantity FROM reservations")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var book uuid.UUID
		var qty int
		if err := rows.Scan(&id, &book, &qty); err != nil {
			t.Fatal(err)
		}
		if reservedLines[id] == nil {
			reservedLines[id] = map[uuid.UUID]int{}
		}
		reservedLines[id][book] = qty
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, ls := range lines {
		want := map[string]string{"reserved": contracts.StockReserved, "rejected": contracts.StockRejected}[answers[id]]
		if want == "" {
			t.Errorf("order %s: answer %q", id, answers[id])
			continue
		}
		if evs := events[id]; len(evs) != 1 || evs[0] != want {
			t.Errorf("order %s answered %s: outcome events %v, want one %s", id, answers[id], evs, want)
		}
		got := reservedLines[id]
		if answers[id] == "rejected" {
			if len(got) != 0 {
				t.Errorf("rejected order %s has reservations %v", id, got)
			}
			continue
		}
		if len(got) != len(ls) {
			t.Errorf("reserved order %s has %d reservation rows, want its %d lines", id, len(got), len(ls))
		}
		for _, l := range ls {
			if got[l.BookID] != l.Quantity {
				t.Errorf("reserved order %s: %d of book %s reserved, want %d", id, got[l.BookID], l.BookID, l.Quantity)
			}
		}
	}
	if len(events) != orders || len(reservedLines) > orders {
		t.Errorf("outcome events for %d orders, reservations for %d: want %d and at most %d", len(events), len(reservedLines), orders, orders)
	}
	if n := testenv.Count(t, pool, "SELECT count(*) FROM inbox WHERE consumer = $1", stock.ConsumerName); n != len(envs) {
		t.Errorf("inbox rows = %d, want one per message id, %d", n, len(envs))
	}

	// Never oversold: reserved is what the reservations add up to, and within on_hand.
	for _, r := range rowsOf(t, pool, `
		SELECT b.title, b.on_hand, b.reserved, coalesce(sum(r.quantity), 0)
		FROM book_stock b LEFT JOIN reservations r ON r.book_id = b.id
		GROUP BY b.id, b.title, b.on_hand, b.reserved HAVING b.reserved <> coalesce(sum(r.quantity), 0) OR b.reserved > b.on_hand`) {
		t.Errorf("book (title, on hand, reserved, sum of its reservations) = %s", r)
	}
	for _, book := range books {
		var onHand, res int
		if err := pool.QueryRow(ctx, "SELECT on_hand, reserved FROM book_stock WHERE id = $1", book).Scan(&onHand, &res); err != nil {
			t.Fatal(err)
		}
		t.Logf("book %s: %d of %d reserved", book, res, onHand)
	}
}
