package experiments

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each `make demo` line is a test here, asserting the numbers the line prints.

func newLab(t *testing.T) *Lab {
	t.Helper()
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "inventory")
	amqpURL := testenv.VHost(t)
	pool, err := pgdb.Open(ctx, admin, dbURL, stock.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "inventory-test", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return &Lab{Pool: pool, AMQPURL: amqpURL, Tel: tel}
}

func TestNaiveDeliveredTwiceReservesTwice(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).NaiveDeliveredTwice(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.DuneReserved != 4 {
		t.Errorf("%s: want Dune reserved 4 (the defect naive exists to show)", r)
	}
}

func TestCheckThenProcessCrashAfterCommitReservesTwice(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).CheckThenProcessCrashAfterCommit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.DuneReserved != 4 {
		t.Errorf("%s: want Dune reserved 4 (the window of check-then-process)", r)
	}
}

func TestInboxDeliveredTwiceReservesOnce(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).InboxDeliveredTwice(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Processed != [2]bool{true, false} || r.DuneReserved != 2 {
		t.Errorf("%s: want processed true, false and Dune reserved 2", r)
	}
}

func TestInboxCrashBeforeCommitLeavesNothingThenReservesOnce(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).InboxCrashBeforeCommit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.ReservedAfterCrash != 0 || r.DuneReserved != 2 {
		t.Errorf("%s: want reserved 0 after the crash and 2 after the redelivery", r)
	}
}

func TestInboxTwoCopiesAtOnceSecondWaitsThenSkips(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).InboxTwoCopiesAtOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Processed != [2]bool{true, false} || r.DuneReserved != 2 || !r.SecondWaited {
		t.Errorf("%s: want processed true, false; Dune reserved 2; second waited true", r)
	}
}

func TestInboxSameIDDifferentContentIsDeadLettered(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).InboxSameIDDifferentContent(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !r.DeadLettered {
		t.Errorf("%s: want the altered copy in the DLQ", r)
	}
	if r.DuneReserved != 2 {
		t.Errorf("Dune reserved %d: the altered copy (3 copies) must change nothing, want 2", r.DuneReserved)
	}
}

// A consumer that keys its inbox on the order's id (the correlation id) swallows the
// order's cancellation as a duplicate of its placement, and the copies stay reserved;
// stock's handler, keyed on the message id, releases them.
func TestCorrelationIDAsDedupKeySwallowsTheCancellation(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).CorrelationIDAsDedupKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !r.Swallowed || r.DuneReserved != 2 {
		t.Errorf("%s: want the cancellation swallowed and Dune reserved 2 (the defect keyed on the correlation id exists to show)", r)
	}
	if r.DuneReservedByStock != 0 {
		t.Errorf("stock's handler left Dune reserved %d after the same placement and cancellation, want 0", r.DuneReservedByStock)
	}
}

// A handler that reserves through the pool inside its transaction keeps the reservation
// when the transaction rolls back, loses its inbox claim with it, and reserves again on
// the redelivery.
func TestHandlerWritingThroughThePoolKeepsItsWriteAfterARollback(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).HandlerWritingThroughThePool(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.ReservedAfterRollback != 2 || !r.ClaimRolledBack || r.DuneReserved != 4 {
		t.Errorf("%s: want reserved 2 after the rollback, the claim rolled back, and Dune reserved 4 after the redelivery", r)
	}
}

// A consumer that records the message first and works second skips the redelivery after
// a crash between the two: the reservation is lost. stock's handler, whose record and
// work commit together, reserves on the redelivery.
func TestRecordingTheKeyBeforeTheWorkLosesTheReservationOnACrash(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).RecordFirstCrashBeforeTheWorkCommits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !r.Skipped || r.DuneReserved != 0 {
		t.Errorf("%s: want the redelivery skipped and nothing reserved (the loss record-first exists to show)", r)
	}
	if r.DuneReservedByStock != adaCopies {
		t.Errorf("stock's handler reserved %d after the same crash and redelivery, want %d", r.DuneReservedByStock, adaCopies)
	}
}

// A consumer that acks on arrival leaves the broker nothing to deliver again when its
// handler dies before the commit: the message and the reservation are lost. The real
// consumer, acking after the commit, handles the message again after the same crash.
func TestAckingBeforeTheWorkCommitsLosesTheMessageOnACrash(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).AckBeforeTheWorkCommits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.LeftInQueue != 0 || r.DuneReserved != 0 {
		t.Errorf("%s: want the queue empty and nothing reserved (the loss acking first exists to show)", r)
	}
	if r.DuneReservedByConsumer != adaCopies {
		t.Errorf("the real consumer reserved %d after the same crash, want %d", r.DuneReservedByConsumer, adaCopies)
	}
}

// A producer that builds its message anew for a retry gives one order two ids, and an
// inbox keyed on the message id applies it twice; the id minted once is skipped the
// second time, and stock's order key refuses the second id too.
func TestAFreshMessageIDOnEverySendIsAppliedTwice(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).FreshIDPerSend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.MessageIDs != 2 || r.DuneReserved != 2*adaCopies {
		t.Errorf("%s: want two ids and the order reserved twice (the defect a fresh id per send exists to show)", r)
	}
	if r.DuneReservedKeptID != adaCopies {
		t.Errorf("with the id kept over the retry, Dune reserved %d, want %d", r.DuneReservedKeptID, adaCopies)
	}
	if r.DuneReservedByStock != adaCopies {
		t.Errorf("stock's handler, given the two ids, reserved %d, want %d", r.DuneReservedByStock, adaCopies)
	}
}

// A handler that fails a duplicate instead of acking it has the consumer return the copy
// to the queue again and again, until the delivery limit dead-letters a message that was
// processed all along; stock's handler acks the copy: two deliveries, no dead letter.
func TestFailingADuplicateLoopsItToTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).DuplicateFailedInsteadOfAcked(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !r.DeadLettered || r.Deliveries <= broker.DeliveryLimit {
		t.Errorf("%s: want the copy delivered past the queue's limit of %d and dead-lettered", r, broker.DeliveryLimit)
	}
	if r.DuneReserved != adaCopies {
		t.Errorf("%s: the first copy reserved, the failed ones must not: want Dune reserved %d", r, adaCopies)
	}
	if r.DeliveriesByStock != r.Copies || r.DeadLetteredByStock {
		t.Errorf("stock's handler: %d deliveries and dead-lettered %t, want %d and false", r.DeliveriesByStock, r.DeadLetteredByStock, r.Copies)
	}
}

// A set-if-absent cache in front of a handler with no dedup of its own catches a copy
// while it remembers, and lets it through once it forgets (a restart): the order is
// reserved twice. In front of stock's inbox the same cache is only an optimisation: the
// inbox skips what the cache forgot.
func TestACacheAsTheOnlyGuardAppliesARedeliveryTwiceOnceItForgets(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).CacheAsTheOnlyGuard(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.ReservedBeforeRestart != adaCopies {
		t.Errorf("%s: before the restart the cache should catch the copy: want Dune reserved %d", r, adaCopies)
	}
	if r.DuneReserved != 2*adaCopies {
		t.Errorf("%s: want the order reserved twice after the restart (the defect a cache as the guard exists to show)", r)
	}
	if r.DuneReservedByStock != adaCopies {
		t.Errorf("the cache in front of stock's inbox: Dune reserved %d, want %d", r.DuneReservedByStock, adaCopies)
	}
}

// RunAll is what `make demo` prints for inventory: the pattern's header and thirteen
// lines, the source article's six in its order, the two pitfalls, then the five wrong
// designs the article warns of, every one with the right numbers beside the ones a
// correct design gives, and ✓ or ✗ as they agree, from one lab reused across experiments.
func TestRunAllPrintsEveryMeasuredLineWithWhatItWanted(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := newLab(t).RunAll(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"== Idempotent consumer (docs/idempotent-consumer.md): Ada orders 2 copies of Dune; want them reserved once, whatever the broker delivers and the process survives",
		"[naive] delivered twice -> Dune reserved: 4 (want 2) ✗ applied twice",
		"[check-then-process] crash after stock commit, redelivered -> Dune reserved: 4 (want 2) ✗ applied twice",
		"[inbox] delivered twice -> processed: true, false; Dune reserved: 2 (want 2) ✓",
		"[inbox] crash before commit -> reserved 0 (want 0); redelivered -> Dune reserved: 2 (want 2) ✓",
		"[inbox] two copies at once -> processed: true, false; Dune reserved: 2 (want 2); second waited for the first: true ✓",
		"[inbox] same id, different content -> dead-lettered: true (want true); Dune reserved: 2 (want 2) ✓",
		"[correlation-id key] placed, then cancelled -> cancellation swallowed: true (want false); Dune reserved: 2 (want 0) ✗ 2 copies held for a cancelled order",
		"[pool write] handler writes through the pool, its transaction rolls back -> write survived: true (want false), claim rolled back: true; redelivered -> Dune reserved: 4 (want 2) ✗ applied twice",
		"[record-first] record committed, crash before the work commits, redelivered -> skipped: true; Dune reserved: 0 (want 2) ✗ lost",
		"[ack first] acked on arrival, crash before the work commits -> left in the queue: 0 (want 1); Dune reserved: 0 (want 2) ✗ lost",
		"[fresh id per send] producer retries a lost confirm with a new id -> message ids: 2 (want 1); Dune reserved: 4 (want 2) ✗ applied twice",
		`^\[duplicate as failure\] a processed message delivered again, its copy failed -> deliveries: (5[1-9]|[6-9][0-9]) \(want 2\), dead-lettered: true \(want false\); Dune reserved: 2 \(want 2\) ✗ looped until the dead-letter queue$`,
		"[cache as the guard] set-if-absent in memory: delivered twice -> Dune reserved: 2; restarted, redelivered -> Dune reserved: 4 (want 2) ✗ applied twice",
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		match := got[i] == want[i]
		if strings.HasPrefix(want[i], "^") {
			match = regexp.MustCompile(want[i]).MatchString(got[i])
		}
		if !match {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}
