package experiments

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each producer-side `make demo` line is a test here, asserting the numbers the line
// prints.

func newLab(t *testing.T) *Lab {
	t.Helper()
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "ordering")
	amqpURL := testenv.VHost(t)
	pool, err := pgdb.Open(ctx, admin, dbURL, orders.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "ordering-test", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return &Lab{Pool: pool, AMQPURL: amqpURL, Tel: tel}
}

func TestCommitThenPublishLosesTheEventWhenTheProcessDiesInBetween(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).CommitThenPublish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.OrderStatus != "pending" || r.Orders != 1 || r.Published != 0 {
		t.Errorf("%s: want the order committed and pending, and no event published (the dual write)", r)
	}
}

func TestPublishThenCommitPublishesAPhantomWhenTheTransactionRollsBack(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).PublishThenCommit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Orders != 0 || r.Published != 1 || r.Phantoms != 1 {
		t.Errorf("%s: want no order, and one event published for it (a phantom)", r)
	}
}

func TestInlinePublishWithoutASenderLeavesTheEventLogRowStuck(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).EventLogInlinePublish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.State != "PublishedFailed" || r.TimesSent != 1 || r.Age <= 0 {
		t.Errorf("%s: want the first order's row PublishedFailed after one send, and still there", r)
	}
	if r.Orders != 2 || r.Published != 1 || r.StuckCopies != 0 {
		t.Errorf("%s: want two orders and only the next one's event published once the broker is back", r)
	}
}

func TestRelayCrashAfterConfirmDeliversTwoCopiesWithOneID(t *testing.T) {
	t.Parallel()
	r, err := newLab(t).RelayCrashAfterConfirm(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.StateAfterCrash != "pending" {
		t.Errorf("%s: the row is %s after the crash, want pending (confirmed, not marked)", r, r.StateAfterCrash)
	}
	if r.Orders != 1 || r.Copies != 2 || r.MessageIDs != 1 || !r.IDIsTheRowID {
		t.Errorf("%s: want two copies, both with the outbox row's id", r)
	}
	if len(r.Redelivered) != 2 || r.Redelivered[0] || r.Redelivered[1] {
		t.Errorf("%s: redelivered flags %v, want false, false: the second copy is a new message to the broker", r, r.Redelivered)
	}
}

// RunAll is what `make demo` prints first: the outbox's header and four lines, in order,
// every one with the right numbers beside the ones a correct design gives, from one lab
// reused across experiments. The three wrong designs end ✗, the outbox ✓.
func TestRunAllPrintsTheFourProducerLinesWithWhatEachWanted(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := newLab(t).RunAll(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^== Transactional outbox \(docs/outbox.md\): want one event published per committed order, none for an order that rolled back$`),
		regexp.MustCompile(`^\[commit-then-publish\] crash between commit and publish -> order: pending, events published: 0 \(want 1\) ✗ the order's event lost$`),
		regexp.MustCompile(`^\[publish-then-commit\] rollback after publish -> orders: 0, events published: 1 \(want 0\) ✗ a phantom: an event of an order that does not exist$`),
		regexp.MustCompile(`^\[event-log inline\] publish fails, no background sender -> event-log row stuck: PublishedFailed, times sent: 1, age: [0-9.]+m?s; ` +
			`with the broker back, events published: 1 \(want 2\), the stuck one's: 0 \(want 1\) ✗ the first order's event never sent$`),
		regexp.MustCompile(`^\[outbox\] relay crash after confirm -> copies delivered: 2, message ids: 1 \(want 1\), redelivered on the second: false ✓$`),
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if !want[i].MatchString(got[i]) {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}
