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

// RunAll is what `make demo` prints: six lines, in the seed article's order, every one of
// them with the right numbers, from one lab reused across experiments.
func TestRunAllPrintsTheSixMeasuredLines(t *testing.T) {
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
