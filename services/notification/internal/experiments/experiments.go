// Package experiments runs the [email] experiment of `make demo` against the real
// Postgres, and returns what it measured; the demo prints it and a test asserts it.
//
// It is the seed article's: Ada's order is confirmed, notification sends her email, and
// the process dies after the provider took the email and before the record says
// 'completed'. The handler is notification's own (package notifications), called
// in-process, against a database of its own and an in-process Provider that counts what
// it is asked. The process's death is a session ended in the window: the experiment holds
// the record's row where phase two would update it, and ends that session there, which
// leaves the database as a crash would. TestCrashAfterSendSendsOnce in cmd/notification
// kills the real process for the same window.
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
	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/notification/internal/provider"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Dune is the book Ada's order holds.
var Dune = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")

// lease is the claim of one attempt. A real crash leaves the claim held until it runs
// out; this one keeps the redelivery's wait short.
const lease = 500 * time.Millisecond

// Lab is where the experiment runs: a migrated notification database of its own and an
// email provider in-process.
type Lab struct {
	Pool     *pgxpool.Pool
	Provider *Provider
	Tel      *telemetry.Telemetry
}

// RunAll prints the pattern's header, runs the experiment and prints its line.
func (l *Lab) RunAll(ctx context.Context, w io.Writer) error {
	r, err := l.EmailCrashAfterSend(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, r)
	return nil
}

// EmailResult is the measurement of EmailCrashAfterSend.
type EmailResult struct {
	// Orders is how many orders notification holds a record of: a correct design sends
	// one email each.
	Orders int
	// EmailsSent is how many emails the provider sent Ada, by its own count.
	EmailsSent int
	// StatusAfterCrash is the record's status when the first attempt died: 'processing'.
	StatusAfterCrash string
	// SecondDelivery is what the redelivery asked of the provider: "reconciled" (it looked
	// the key up, found the email and sent nothing), "replayed by the provider" (it sent
	// again, and the provider answered from the key's record), or "sent again".
	SecondDelivery string
	// StatusAfterRedelivery is the record's status after the redelivery: 'completed'.
	StatusAfterRedelivery string
}

func (r EmailResult) String() string {
	harm := "the order emailed twice"
	if r.EmailsSent < r.Orders {
		harm = "the order's email lost"
	}
	return fmt.Sprintf("[email] crash after send, redelivered -> emails sent: %s, second delivery: %s %s",
		wanted(r.EmailsSent, r.Orders), r.SecondDelivery, verdict(r.EmailsSent == r.Orders, harm))
}

// EmailCrashAfterSend: inventory's StockReserved for Ada's order arrives; notification
// commits the record 'processing' with the provider's Idempotency-Key, the provider sends
// the email, and the process dies before phase two. The broker delivers the event again
// to a restarted notification, which finds the record 'processing' and asks the provider
// by key before sending: the provider has the email, and the record is completed without
// a second one.
func (l *Lab) EmailCrashAfterSend(ctx context.Context) (EmailResult, error) {
	var r EmailResult
	orderID, err := uuid.NewV7()
	if err != nil {
		return r, err
	}
	msg, err := event.New(contracts.InventorySource, contracts.StockReserved, orderID.String(), 1, contracts.StockReservedData{
		OrderID: orderID, CustomerEmail: "ada@example.com", Lines: []contracts.Line{{BookID: Dune, Quantity: 2}},
	})
	if err != nil {
		return r, err
	}

	crashing, err := l.notifications()
	if err != nil {
		return r, err
	}
	if err := l.crashAfterSend(ctx, crashing, msg, orderID); err != nil {
		return r, err
	}
	if r.StatusAfterCrash, err = l.status(ctx, orderID); err != nil {
		return r, err
	}
	// The restarted process may claim the record once the dead one's lease has run out.
	if err := sandbox.WaitFor(ctx, l.Pool, 10*time.Second, "the dead attempt's lease to run out",
		"SELECT claimed_until <= now() FROM notifications WHERE order_id = $1", orderID); err != nil {
		return r, err
	}

	before := l.Provider.Counts()
	restarted, err := l.notifications()
	if err != nil {
		return r, err
	}
	if _, err := restarted.HandleStockEvent(ctx, msg); err != nil {
		return r, fmt.Errorf("redelivery: %w", err)
	}
	after := l.Provider.Counts()
	switch {
	case after.Sent > before.Sent:
		r.SecondDelivery = "sent again"
	case after.Replayed > before.Replayed:
		r.SecondDelivery = "replayed by the provider"
	case after.LookupsFound > before.LookupsFound:
		r.SecondDelivery = "reconciled"
	default:
		r.SecondDelivery = "nothing asked of the provider"
	}
	r.EmailsSent = after.Sent
	if err := l.Pool.QueryRow(ctx, "SELECT count(DISTINCT order_id) FROM notifications").Scan(&r.Orders); err != nil {
		return r, fmt.Errorf("count the orders: %w", err)
	}
	r.StatusAfterRedelivery, err = l.status(ctx, orderID)
	return r, err
}

// crashAfterSend delivers msg to svc and kills the attempt after the provider sent the
// email: the provider's answer waits until the record's row is locked (holdRecord), so
// phase two's update waits on that lock, and the experiment ends its session there, as
// the process dying would.
func (l *Lab) crashAfterSend(ctx context.Context, svc *notifications.Service, msg event.Envelope, orderID uuid.UUID) error {
	held := make(chan error, 1)
	var letGo func()
	l.Provider.holdAfterSend(func(string) {
		var err error
		letGo, err = l.holdRecord(ctx, orderID)
		held <- err
	})
	defer l.Provider.holdAfterSend(nil)

	done := make(chan error, 1)
	go func() { _, err := svc.HandleStockEvent(ctx, msg); done <- err }()
	var err error
	select {
	case err = <-held:
	case err = <-done:
		return fmt.Errorf("first delivery ended before the provider sent the email: %v", err)
	}
	if err != nil {
		<-done
		return err
	}
	defer letGo()
	pid, err := sandbox.WaitForLockWait(ctx, l.Pool, "completed_at", 10*time.Second)
	if err == nil && pid == 0 {
		err = errors.New("first delivery: it never reached phase two")
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

// holdRecord locks the order's notification row until letGo: an update of it (phase two)
// waits there. letGo may be called more than once.
func (l *Lab) holdRecord(ctx context.Context, orderID uuid.UUID) (letGo func(), err error) {
	tx, err := l.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("hold the record: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM notifications WHERE order_id = $1 FOR UPDATE", orderID); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("hold the record: %w", err)
	}
	return func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }, nil
}

func (l *Lab) status(ctx context.Context, orderID uuid.UUID) (string, error) {
	var s string
	if err := l.Pool.QueryRow(ctx, "SELECT status FROM notifications WHERE order_id = $1", orderID).Scan(&s); err != nil {
		return "", fmt.Errorf("read the record: %w", err)
	}
	return s, nil
}

// notifications is a notification service as the process starts it, on the lab's
// database and provider.
func (l *Lab) notifications() (*notifications.Service, error) {
	client, err := provider.New(l.Provider.URL, "experiments-key", 5*time.Second, l.Tel)
	if err != nil {
		return nil, err
	}
	return notifications.NewService(l.Pool, client, notifications.Config{
		MaxAttempts:    5,
		Lease:          lease,
		ReconcileAfter: time.Minute,
		SweepInterval:  time.Minute,
	}, l.Tel)
}
