package experiments

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	"github.com/bookstore-go/bookstore/testenv"
)

// The `make demo` line of notification is a test here, asserting the numbers it prints.

func newLab(t *testing.T) *Lab {
	t.Helper()
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "notification")
	pool, err := pgdb.Open(ctx, admin, dbURL, notifications.Migrations...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p, stop, err := StartProvider()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "notification-test", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return &Lab{Pool: pool, Provider: p, Tel: tel}
}

// The process dies after the provider sent the email and before the record says
// 'completed'; the redelivery finds 'processing', looks the key up at the provider, finds
// the email and completes the record: one email, and the second delivery sent nothing.
func TestEmailCrashAfterSendIsReconciledNotSentAgain(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	lab := newLab(t)
	if err := lab.RunAll(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	want := "== Exactly-once email (docs/exactly-once-email.md): want one email per order, whatever the process survives\n" +
		"[email] crash after send, redelivered -> emails sent: 1 (want 1), second delivery: reconciled ✓"
	if got := strings.TrimSpace(out.String()); got != want {
		t.Errorf("RunAll printed\n %s\nwant\n %s", got, want)
	}
	if c := lab.Provider.Counts(); c.Sent != 1 || c.Replayed != 0 || c.LookupsFound != 1 {
		t.Errorf("the provider was asked %+v, want one send and one lookup that found it", c)
	}
	var status string
	var attempts int
	if err := lab.Pool.QueryRow(context.Background(), "SELECT status, attempts FROM notifications").Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "completed" || attempts != 2 {
		t.Errorf("record %s after %d attempts, want completed after 2 (the send, then the reconciliation)", status, attempts)
	}
}
