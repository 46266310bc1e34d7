// Package notifications sends one email per order outcome through a third-party email
// provider, exactly once as far as the customer can tell.
//
// An email cannot join a database transaction, so no ordering of "send" and "commit"
// is safe on its own: send first and a crash before commit sends again on redelivery;
// commit first and a crash before sending loses the email. This package closes the gap
// with a two-phase record and reconciliation (read handle.go first):
//
//  1. Commit a record 'processing' for (order, kind), holding the provider's
//     Idempotency-Key, before calling the provider.
//  2. Call the provider with that key.
//  3. Mark the record 'completed'.
//
// A crash or timeout between 1 and 3 leaves a record that says "the provider may or may
// not have it". Whoever finds it next (a redelivery of the event, a duplicate under
// another message id, or the sweeper) asks the provider by key before sending again, and
// the key makes even a second send harmless. See docs/exactly-once-email.md.
package notifications

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/notification/internal/provider"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// Kind is which email an order gets.
type Kind string

const (
	OrderConfirmed Kind = "order-confirmed" // for inventory.stock-reserved.v1
	OrderRejected  Kind = "order-rejected"  // for inventory.stock-rejected.v1
	OrderCancelled Kind = "order-cancelled" // for inventory.stock-released.v1
)

// Known reports whether k is a kind, as the cursor of GET /notifications (the
// position after a record) must be.
func (k Kind) Known() bool {
	return k == OrderConfirmed || k == OrderRejected || k == OrderCancelled
}

// Status is where a notification record is in its two phases.
type Status string

const (
	// Processing: committed before the provider call; an attempt holds it, or died holding it.
	Processing Status = "processing"
	// Completed: the provider has the email. Final.
	Completed Status = "completed"
	// NeedsReconciliation: an attempt ended without knowing whether the provider has it.
	NeedsReconciliation Status = "needs-reconciliation"
	// Failed: out of attempts, or the provider refused the request. Final; counted.
	Failed Status = "failed"
)

// Notification is a record as GET /notifications shows it.
type Notification struct {
	OrderID        uuid.UUID `json:"order_id"`
	Kind           Kind      `json:"kind"`
	Status         Status    `json:"status"`
	IdempotencyKey string    `json:"idempotency_key"`
	Attempts       int       `json:"attempts"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// IdempotencyKey is the provider key of an order's email of a kind. It depends on the
// order and the kind only, never on the message id, so the same outcome published twice
// under two ids still asks the provider for one email.
func IdempotencyKey(orderID uuid.UUID, kind Kind) string {
	return "order/" + orderID.String() + "/" + string(kind)
}

// email is one email an event asks for.
type email struct {
	orderID uuid.UUID
	kind    Kind
	message provider.Message
	// afterConfirmation: the order was confirmed before it was cancelled (inventory gave
	// back copies it had reserved), so its confirmation email is due too, and goes first.
	afterConfirmation bool
}

// emailFor reads a stock event and writes the email it asks for. Anything that cannot be
// read is poison: no retry makes it readable.
func emailFor(env event.Envelope) (email, error) {
	switch env.Type {
	case contracts.StockReserved:
		var d contracts.StockReservedData
		if err := env.DecodeData(&d); err != nil {
			return email{}, err
		}
		if err := validData(d.OrderID, d.CustomerEmail, env); err != nil {
			return email{}, err
		}
		return email{orderID: d.OrderID, kind: OrderConfirmed, message: provider.Message{
			To:      d.CustomerEmail,
			Subject: fmt.Sprintf("Your Bookstore order %s is confirmed", d.OrderID),
			Text:    confirmedText(d.OrderID, d.Lines),
		}}, nil
	case contracts.StockRejected:
		var d contracts.StockRejectedData
		if err := env.DecodeData(&d); err != nil {
			return email{}, err
		}
		if err := validData(d.OrderID, d.CustomerEmail, env, d.Reason); err != nil {
			return email{}, err
		}
		return email{orderID: d.OrderID, kind: OrderRejected, message: provider.Message{
			To:      d.CustomerEmail,
			Subject: fmt.Sprintf("Your Bookstore order %s could not be fulfilled", d.OrderID),
			Text:    rejectedText(d.OrderID, d.Lines, d.Reason),
		}}, nil
	case contracts.StockReleased:
		var d contracts.StockReleasedData
		if err := env.DecodeData(&d); err != nil {
			return email{}, err
		}
		if err := validData(d.OrderID, d.CustomerEmail, env); err != nil {
			return email{}, err
		}
		return email{orderID: d.OrderID, kind: OrderCancelled, afterConfirmation: len(d.Lines) > 0, message: provider.Message{
			To:      d.CustomerEmail,
			Subject: fmt.Sprintf("Your Bookstore order %s is cancelled", d.OrderID),
			Text:    cancelledText(d.OrderID, d.Lines),
		}}, nil
	}
	return email{}, event.Poison(event.ReasonUnknownType, fmt.Errorf("type %q", env.Type))
}

// validData checks what the email is written from: the order the subject names, a
// recipient that is an address by the rule ordering's API and the provider apply
// (contracts.AddressProblem), and texts (a rejection's reason) of bounded length with no
// control character. The record that holds them could not be written with a NUL, and a
// 50 MB recipient would be stored and sent on to a provider that refuses it: either way
// the event would fail after work instead of being dead-lettered once, unread.
func validData(orderID uuid.UUID, to string, env event.Envelope, texts ...string) error {
	switch {
	case contracts.OrderIDProblem(orderID, env.Subject) != "":
		return event.Poison(event.ReasonInvalidData, errors.New(contracts.OrderIDProblem(orderID, env.Subject)))
	case to == "":
		return event.Poison(event.ReasonInvalidData, fmt.Errorf("%s for order %s has no customer_email", env.Type, orderID))
	case contracts.AddressProblem(to) != "":
		return event.Poison(event.ReasonInvalidData, fmt.Errorf("%s for order %s: customer_email %s %s", env.Type, orderID, event.Truncate(to), contracts.AddressProblem(to)))
	}
	for _, s := range texts {
		if p := contracts.TextProblem(s, contracts.MaxReasonLen); p != "" {
			return event.Poison(event.ReasonInvalidData, fmt.Errorf("%s for order %s: %s %s", env.Type, orderID, event.Truncate(s), p))
		}
	}
	return nil
}

func confirmedText(orderID uuid.UUID, lines []contracts.Line) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Hello,\n\nyour order %s is confirmed: every book in it is reserved for you.\n\n", orderID)
	writeLines(&b, lines)
	b.WriteString("\nThank you for shopping at Bookstore.\n")
	return b.String()
}

func rejectedText(orderID uuid.UUID, lines []contracts.Line, reason string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Hello,\n\nwe are sorry: your order %s could not be fulfilled", orderID)
	if reason != "" {
		fmt.Fprintf(&b, " (%s)", reason)
	}
	b.WriteString(". Nothing was reserved and nothing will be charged.\n\n")
	writeLines(&b, lines)
	b.WriteString("\nBookstore\n")
	return b.String()
}

func cancelledText(orderID uuid.UUID, released []contracts.Line) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Hello,\n\nyour order %s is cancelled, as you asked.", orderID)
	if len(released) > 0 {
		b.WriteString(" The books reserved for it are back on the shelf:\n\n")
		writeLines(&b, released)
	} else {
		b.WriteString(" Nothing was reserved for it.\n")
	}
	b.WriteString("\nNothing will be charged.\n\nBookstore\n")
	return b.String()
}

func writeLines(b *strings.Builder, lines []contracts.Line) {
	for _, l := range lines {
		fmt.Fprintf(b, "  %3d x book %s\n", l.Quantity, l.BookID)
	}
}
