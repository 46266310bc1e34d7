package experiments

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
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

// RunAll is what `make demo` prints for inventory: eight lines, the seed article's six in
// its order and then the two pitfalls, every one of them with the right numbers, from one
// lab reused across experiments.
func TestRunAllPrintsTheEightMeasuredLines(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := newLab(t).RunAll(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"[naive] delivered twice -> Dune reserved: 4",
		"[check-then-process] crash after stock commit, redelivered -> Dune reserved: 4",
		"[inbox] delivered twice -> processed: true, false; Dune reserved: 2",
		"[inbox] crash before commit -> reserved 0; redelivered -> Dune reserved: 2",
		"[inbox] two copies at once -> processed: true, false; Dune reserved: 2; second waited for the first: true",
		"[inbox] same id, different content -> dead-lettered",
		"[correlation-id key] placed, then cancelled -> cancellation swallowed: true; Dune reserved: 2",
		"[pool write] handler writes through the pool, its transaction rolls back -> write survived: true, claim rolled back: true; redelivered -> Dune reserved: 4",
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}
