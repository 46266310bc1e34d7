// Package experiments runs the idempotent-consumer experiments of `make demo` against the
// real Postgres (and RabbitMQ, where the broker's part is the lesson), and returns what
// each one measured. The demo prints the results, each beside the value a correct design
// gives; the tests assert them. Nothing here is a constant: a line that says "Dune
// reserved: 4" read 4 from the books table a moment before.
//
// Each experiment is the source article's: Ada orders two copies of Dune, and the broker
// delivers her OrderPlaced twice, or twice at once, or the consumer dies half-way; or she
// cancels, and a consumer keyed on her order's id takes the cancellation for a copy; or
// the producer sends her order again under a new id. The handlers are inventory's own
// (package stock) and the wrong ones (package wrongways), called in-process or through
// the real consumer. A wrong one "crashes" at a hook that returns an error where the real
// process would be killed; stock's handler, which has no hooks, is held in its window by
// a lock on the outbox and its session ended there. Either leaves the database as a
// crash would. The tests in cmd/inventory kill the real process for the same windows.
package experiments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Dune is the seeded book every experiment orders.
var Dune = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")

// errSimulatedCrash stands for the process dying at a hook.
var errSimulatedCrash = errors.New("simulated crash")

// Lab is where the experiments run: a migrated inventory database of their own, and a
// RabbitMQ virtual host of their own for the one that needs a queue.
type Lab struct {
	Pool    *pgxpool.Pool
	AMQPURL string
	Tel     *telemetry.Telemetry
}

// Result is one experiment's measurement, printed as one line.
type Result interface{ String() string }

// RunAll prints the pattern's header, then runs every experiment in the source article's
// order, then the two pitfalls (a correlation id as the key, a write through the pool),
// then the wrong designs the article warns of (the record first, the ack first, a fresh
// id per send, a duplicate failed, a cache as the guard), and prints one line each.
func (l *Lab) RunAll(ctx context.Context, w io.Writer) error {
	fmt.Fprintln(w, header)
	steps := []func(context.Context) (Result, error){
		func(ctx context.Context) (Result, error) { return l.NaiveDeliveredTwice(ctx) },
		func(ctx context.Context) (Result, error) { return l.CheckThenProcessCrashAfterCommit(ctx) },
		func(ctx context.Context) (Result, error) { return l.InboxDeliveredTwice(ctx) },
		func(ctx context.Context) (Result, error) { return l.InboxCrashBeforeCommit(ctx) },
		func(ctx context.Context) (Result, error) { return l.InboxTwoCopiesAtOnce(ctx) },
		func(ctx context.Context) (Result, error) { return l.InboxSameIDDifferentContent(ctx) },
		func(ctx context.Context) (Result, error) { return l.CorrelationIDAsDedupKey(ctx) },
		func(ctx context.Context) (Result, error) { return l.HandlerWritingThroughThePool(ctx) },
		func(ctx context.Context) (Result, error) { return l.RecordFirstCrashBeforeTheWorkCommits(ctx) },
		func(ctx context.Context) (Result, error) { return l.AckBeforeTheWorkCommits(ctx) },
		func(ctx context.Context) (Result, error) { return l.FreshIDPerSend(ctx) },
		func(ctx context.Context) (Result, error) { return l.DuplicateFailedInsteadOfAcked(ctx) },
		func(ctx context.Context) (Result, error) { return l.CacheAsTheOnlyGuard(ctx) },
	}
	for _, step := range steps {
		r, err := step(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, r)
	}
	return nil
}

// NaiveResult is the measurement of NaiveDeliveredTwice.
type NaiveResult struct {
	Ordered      int // copies of Dune in Ada's order: what a correct design reserves
	DuneReserved int
}

func (r NaiveResult) String() string {
	return fmt.Sprintf("[naive] delivered twice -> Dune reserved: %s %s", wanted(r.DuneReserved, r.Ordered), reservedVerdict(r.DuneReserved, r.Ordered))
}

// NaiveDeliveredTwice: the ack was lost and the broker delivered Ada's order again. The
// naive handler applies both deliveries.
func (l *Lab) NaiveDeliveredTwice(ctx context.Context) (NaiveResult, error) {
	if err := l.reset(ctx); err != nil {
		return NaiveResult{}, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return NaiveResult{}, err
	}
	naive, err := l.wrongWay(wrongways.Naive, wrongways.Hooks{})
	if err != nil {
		return NaiveResult{}, err
	}
	for range 2 {
		if _, err := naive.HandleOrderEvent(ctx, msg); err != nil {
			return NaiveResult{}, fmt.Errorf("naive delivery: %w", err)
		}
	}
	n, err := l.duneReserved(ctx)
	return NaiveResult{Ordered: adaCopies, DuneReserved: n}, err
}

// CheckThenProcessResult is the measurement of CheckThenProcessCrashAfterCommit.
type CheckThenProcessResult struct {
	Ordered      int // copies of Dune in Ada's order: what a correct design reserves
	DuneReserved int
}

func (r CheckThenProcessResult) String() string {
	return fmt.Sprintf("[check-then-process] crash after stock commit, redelivered -> Dune reserved: %s %s",
		wanted(r.DuneReserved, r.Ordered), reservedVerdict(r.DuneReserved, r.Ordered))
}

// CheckThenProcessCrashAfterCommit: the handler checked the inbox, committed the
// reservation, and died before recording the message. The redelivery passes the check.
func (l *Lab) CheckThenProcessCrashAfterCommit(ctx context.Context) (CheckThenProcessResult, error) {
	if err := l.reset(ctx); err != nil {
		return CheckThenProcessResult{}, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return CheckThenProcessResult{}, err
	}
	crashing, err := l.wrongWay(wrongways.CheckThenProcess, wrongways.Hooks{AfterCommit: crash})
	if err != nil {
		return CheckThenProcessResult{}, err
	}
	if _, err := crashing.HandleOrderEvent(ctx, msg); !errors.Is(err, errSimulatedCrash) {
		return CheckThenProcessResult{}, fmt.Errorf("first delivery: want the simulated crash, got %v", err)
	}
	restarted, err := l.wrongWay(wrongways.CheckThenProcess, wrongways.Hooks{})
	if err != nil {
		return CheckThenProcessResult{}, err
	}
	if _, err := restarted.HandleOrderEvent(ctx, msg); err != nil {
		return CheckThenProcessResult{}, fmt.Errorf("redelivery: %w", err)
	}
	n, err := l.duneReserved(ctx)
	return CheckThenProcessResult{Ordered: adaCopies, DuneReserved: n}, err
}

// InboxTwiceResult is the measurement of InboxDeliveredTwice.
type InboxTwiceResult struct {
	Ordered      int // copies of Dune in Ada's order: what a correct design reserves
	Processed    [2]bool
	DuneReserved int
}

func (r InboxTwiceResult) String() string {
	return fmt.Sprintf("[inbox] delivered twice -> processed: %t, %t; Dune reserved: %s %s", r.Processed[0], r.Processed[1],
		wanted(r.DuneReserved, r.Ordered), verdict(r.Processed == [2]bool{true, false} && r.DuneReserved == r.Ordered, reservedHarm(r.DuneReserved, r.Ordered)))
}

// InboxDeliveredTwice: the same redelivery, handled through the inbox.
func (l *Lab) InboxDeliveredTwice(ctx context.Context) (InboxTwiceResult, error) {
	r := InboxTwiceResult{Ordered: adaCopies}
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	for i := range 2 {
		outcome, err := svc.HandleOrderEvent(ctx, msg)
		if err != nil {
			return r, fmt.Errorf("inbox delivery %d: %w", i+1, err)
		}
		r.Processed[i] = outcome == inbox.Processed
	}
	r.DuneReserved, err = l.duneReserved(ctx)
	return r, err
}

// InboxCrashResult is the measurement of InboxCrashBeforeCommit.
type InboxCrashResult struct {
	Ordered            int // copies of Dune in Ada's order: what a correct design reserves
	ReservedAfterCrash int // a correct design's crash before the commit leaves none
	DuneReserved       int
}

func (r InboxCrashResult) String() string {
	return fmt.Sprintf("[inbox] crash before commit -> reserved %s; redelivered -> Dune reserved: %s %s",
		wanted(r.ReservedAfterCrash, 0), wanted(r.DuneReserved, r.Ordered),
		verdict(r.ReservedAfterCrash == 0 && r.DuneReserved == r.Ordered, reservedHarm(r.DuneReserved, r.Ordered)))
}

// InboxCrashBeforeCommit: the handler wrote the inbox row and the reservation and died
// before commit. Both are gone; the redelivery does the work from scratch.
func (l *Lab) InboxCrashBeforeCommit(ctx context.Context) (InboxCrashResult, error) {
	r := InboxCrashResult{Ordered: adaCopies}
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	crashing, err := l.stock()
	if err != nil {
		return r, err
	}
	if err := l.crashAtOutcomeEvent(ctx, crashing, msg); err != nil {
		return r, err
	}
	if r.ReservedAfterCrash, err = l.duneReserved(ctx); err != nil {
		return r, err
	}
	restarted, err := l.stock()
	if err != nil {
		return r, err
	}
	if _, err := restarted.HandleOrderEvent(ctx, msg); err != nil {
		return r, fmt.Errorf("redelivery: %w", err)
	}
	r.DuneReserved, err = l.duneReserved(ctx)
	return r, err
}

// crashAtOutcomeEvent delivers msg to svc, holds it at its outcome event (holdOutbox)
// and ends its session there, as the process dying would: Postgres rolls back its
// transaction.
func (l *Lab) crashAtOutcomeEvent(ctx context.Context, svc *stock.Service, msg event.Envelope) error {
	letGo, err := l.holdOutbox(ctx)
	if err != nil {
		return err
	}
	defer letGo()
	done := make(chan error, 1)
	go func() { _, err := svc.HandleOrderEvent(ctx, msg); done <- err }()
	pid, err := sandbox.WaitForLockWait(ctx, l.Pool, "INSERT INTO outbox", 10*time.Second)
	if err == nil && pid == 0 {
		err = errors.New("first delivery: it never reached its outcome event")
	}
	if err == nil {
		_, err = l.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
	}
	if err != nil {
		letGo()
		<-done
		return err
	}
	if err := <-done; err == nil {
		return errors.New("first delivery: want the crash, got no error")
	}
	return nil
}

// ConcurrentResult is the measurement of InboxTwoCopiesAtOnce.
type ConcurrentResult struct {
	Ordered      int // copies of Dune in Ada's order: what a correct design reserves
	Processed    [2]bool
	DuneReserved int
	// SecondWaited: while the first copy held its transaction open, Postgres showed the
	// second copy's session waiting on a lock, and the second had not returned; it
	// returned only after the first was released to commit.
	SecondWaited bool
}

func (r ConcurrentResult) String() string {
	return fmt.Sprintf("[inbox] two copies at once -> processed: %t, %t; Dune reserved: %s; second waited for the first: %t %s",
		r.Processed[0], r.Processed[1], wanted(r.DuneReserved, r.Ordered), r.SecondWaited,
		verdict(r.Processed == [2]bool{true, false} && r.DuneReserved == r.Ordered && r.SecondWaited, reservedHarm(r.DuneReserved, r.Ordered)))
}

// InboxTwoCopiesAtOnce: two consumers get the same message at the same moment. The first
// inserts its inbox row and holds its transaction open (holdOutbox); the second arrives
// while it does. No "seen it?" check can decide this race, since neither has committed;
// the inbox's primary key does: the second insert waits for the first transaction, then
// finds the row and skips.
func (l *Lab) InboxTwoCopiesAtOnce(ctx context.Context) (ConcurrentResult, error) {
	r := ConcurrentResult{Ordered: adaCopies}
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	msg, err := adasOrder(adaCopies)
	if err != nil {
		return r, err
	}
	svc, err := l.stock()
	if err != nil {
		return r, err
	}
	letGo, err := l.holdOutbox(ctx)
	if err != nil {
		return r, err
	}
	defer letGo()

	type done struct {
		outcome inbox.Outcome
		err     error
	}
	firstDone, secondDone := make(chan done, 1), make(chan done, 1)
	go func() { o, err := svc.HandleOrderEvent(ctx, msg); firstDone <- done{o, err} }()
	if pid, err := sandbox.WaitForLockWait(ctx, l.Pool, "INSERT INTO outbox", 10*time.Second); err != nil || pid == 0 {
		letGo()
		d := <-firstDone
		return r, fmt.Errorf("first copy never held its transaction at its outcome event: %v, %v", err, d.err)
	}
	go func() { o, err := svc.HandleOrderEvent(ctx, msg); secondDone <- done{o, err} }()

	pid, err := sandbox.WaitForLockWait(ctx, l.Pool, "INSERT INTO inbox", 10*time.Second)
	if err != nil {
		letGo()
		return r, err
	}
	returnedEarly := false
	select {
	case d := <-secondDone:
		returnedEarly = true
		secondDone <- d
	default:
	}
	letGo()
	f, s := <-firstDone, <-secondDone
	if f.err != nil || s.err != nil {
		return r, fmt.Errorf("copies: first %v, second %v", f.err, s.err)
	}
	r.Processed = [2]bool{f.outcome == inbox.Processed, s.outcome == inbox.Processed}
	r.SecondWaited = pid != 0 && !returnedEarly
	r.DuneReserved, err = l.duneReserved(ctx)
	return r, err
}

// holdOutbox locks the outbox table against every insert until letGo: a handler that
// reaches its outcome event waits there, its transaction open, with its inbox row and
// reservation written and not committed. letGo may be called more than once.
func (l *Lab) holdOutbox(ctx context.Context) (letGo func(), err error) {
	tx, err := l.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("hold the outbox: %w", err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE outbox IN SHARE MODE"); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("hold the outbox: %w", err)
	}
	return func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }, nil
}

func crash(context.Context) error { return errSimulatedCrash }

func (l *Lab) stock() (*stock.Service, error) {
	return stock.NewService(l.Pool, l.Tel, stock.Options{})
}

func (l *Lab) wrongWay(strategy wrongways.Strategy, hooks wrongways.Hooks) (*wrongways.Consumer, error) {
	return l.wrongConsumer(wrongways.Options{Strategy: strategy, Hooks: hooks})
}

func (l *Lab) wrongConsumer(opts wrongways.Options) (*wrongways.Consumer, error) {
	svc, err := l.stock()
	if err != nil {
		return nil, err
	}
	return wrongways.New(l.Pool, l.Tel, svc, opts)
}

// reset gives the next experiment the seed's starting point: nothing reserved, no message
// seen, no event waiting.
func (l *Lab) reset(ctx context.Context) error {
	_, err := l.Pool.Exec(ctx, `
		TRUNCATE inbox, reservations, outbox;
		UPDATE stock_levels SET reserved = 0 WHERE reserved <> 0;
		UPDATE stock_levels SET on_hand = 10 WHERE book_id = '`+Dune.String()+`'`)
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

func (l *Lab) duneReserved(ctx context.Context) (int, error) {
	var n int
	if err := l.Pool.QueryRow(ctx, "SELECT reserved FROM book_stock WHERE id = $1", Dune).Scan(&n); err != nil {
		return 0, fmt.Errorf("read Dune: %w", err)
	}
	return n, nil
}

// adasOrder is the OrderPlaced event of a new order of quantity copies of Dune, as
// ordering's outbox would have written it.
func adasOrder(quantity int) (event.Envelope, error) {
	orderID, err := uuid.NewV7()
	if err != nil {
		return event.Envelope{}, err
	}
	return orderEvent(orderID, quantity)
}

// orderEvent is an OrderPlaced event of Ada's order orderID, of quantity copies of Dune,
// under an id of its own: each call is a new message, even for the same order.
func orderEvent(orderID uuid.UUID, quantity int) (event.Envelope, error) {
	return event.New(contracts.OrderingSource, contracts.OrderPlaced, orderID.String(), 1, contracts.OrderPlacedData{
		OrderID:       orderID,
		CustomerEmail: "ada@example.com",
		Lines:         []contracts.Line{{BookID: Dune, Quantity: quantity}},
		PlacedAt:      time.Now().UTC().Truncate(time.Microsecond),
	})
}
