// Package orderevent reads the events of ordering that inventory consumes: an
// OrderPlaced of either version as an Order, an OrderCancelled as a Cancellation. Each is
// checked as it is read, and every error is poison, so that what the consumer hands on is
// an order inventory can answer and announce.
package orderevent

import (
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// Order is what inventory needs of an OrderPlaced event, whatever its version: the
// reservation and the outcome event are written from this, never from a version's data.
type Order struct {
	ID            uuid.UUID
	CustomerEmail string
	Lines         []contracts.Line
}

// OrderOf reads and checks the order an event carries, by its version: one small function
// per version turns that version's data into an Order, and the checks after it are the
// same for all. Every error is poison.
func OrderOf(env event.Envelope) (Order, error) {
	var o Order
	var err error
	switch env.Type {
	case contracts.OrderPlaced:
		o, err = orderFromV1(env)
	case contracts.OrderPlacedV2:
		o, err = orderFromV2(env)
	default: // the consumer's Types let no other type through; this keeps it so
		return o, event.Poison(event.ReasonUnknownType, fmt.Errorf("%s %s: not an order-placed version inventory reads", env.Type, env.ID))
	}
	if err != nil {
		return o, err
	}
	return o, checkOrder(env, o)
}

// orderFromV1 reads ordering.order-placed.v1: the customer's email is a flat field.
func orderFromV1(env event.Envelope) (Order, error) {
	var d contracts.OrderPlacedData
	if err := env.DecodeData(&d); err != nil {
		return Order{}, err
	}
	if d.CustomerEmail == "" {
		return Order{}, invalidData(env, "customer_email is missing")
	}
	return Order{ID: d.OrderID, CustomerEmail: d.CustomerEmail, Lines: d.Lines}, nil
}

// orderFromV2 reads ordering.order-placed.v2: the customer is an object, and its email
// is required. Its optional name is not needed to reserve stock, so it is read (the data
// is decoded strictly) and left.
func orderFromV2(env event.Envelope) (Order, error) {
	var d contracts.OrderPlacedV2Data
	if err := env.DecodeData(&d); err != nil {
		return Order{}, err
	}
	if d.Customer.Email == "" {
		return Order{}, invalidData(env, "customer.email is missing")
	}
	if p := contracts.TextProblem(d.Customer.Name, contracts.MaxNameLen); p != "" {
		return Order{}, invalidData(env, "customer.name %s", p)
	}
	return Order{ID: d.OrderID, CustomerEmail: d.Customer.Email, Lines: d.Lines}, nil
}

// checkOrder is what every version's order must be: an id equal to the subject, a
// customer email that is an address by the rule ordering's API applies to an order
// (contracts.AddressProblem: the outcome event carries it on to notification, which
// would store it and send it to the provider; a NUL would fail notification's record on
// every redelivery instead of here once, and a 50 MB one would be stored and republished
// whole), and 1 to MaxLines lines of distinct books with quantities of 1 to MaxQuantity.
func checkOrder(env event.Envelope, o Order) error {
	switch {
	case contracts.OrderIDProblem(o.ID, env.Subject) != "":
		return invalidData(env, "%s", contracts.OrderIDProblem(o.ID, env.Subject))
	case contracts.AddressProblem(o.CustomerEmail) != "":
		return invalidData(env, "the customer email %s %s", event.Truncate(o.CustomerEmail), contracts.AddressProblem(o.CustomerEmail))
	case len(o.Lines) == 0 || len(o.Lines) > contracts.MaxLines:
		return invalidData(env, "%d lines, want 1 to %d", len(o.Lines), contracts.MaxLines)
	}
	seen := map[uuid.UUID]bool{}
	for i, l := range o.Lines {
		switch {
		case l.BookID == uuid.Nil:
			return invalidData(env, "lines[%d].book_id is missing", i)
		case seen[l.BookID]:
			return invalidData(env, "lines[%d].book_id %s appears twice", i, l.BookID)
		case l.Quantity < 1 || l.Quantity > contracts.MaxQuantity:
			return invalidData(env, "lines[%d].quantity %d, want 1 to %d", i, l.Quantity, contracts.MaxQuantity)
		}
		seen[l.BookID] = true
	}
	return nil
}

// Cancellation is what inventory needs of an OrderCancelled event.
type Cancellation struct {
	OrderID       uuid.UUID
	CustomerEmail string
	Sequence      int64
}

// CancellationOf reads and checks the cancellation an event carries. Every error is poison.
func CancellationOf(env event.Envelope) (Cancellation, error) {
	var d contracts.OrderCancelledData
	if err := env.DecodeData(&d); err != nil {
		return Cancellation{}, err
	}
	seq, err := strconv.ParseInt(env.Sequence, 10, 64)
	switch {
	case err != nil:
		return Cancellation{}, invalidData(env, "sequence %q", env.Sequence)
	case seq < 2:
		// The order's placement is its sequence 1; a cancellation comes after it.
		return Cancellation{}, invalidData(env, "sequence %d, a cancellation's is at least 2", seq)
	case contracts.OrderIDProblem(d.OrderID, env.Subject) != "":
		return Cancellation{}, invalidData(env, "%s", contracts.OrderIDProblem(d.OrderID, env.Subject))
	case contracts.AddressProblem(d.CustomerEmail) != "":
		// The rule of ordering's API, as an order's (checkOrder).
		return Cancellation{}, invalidData(env, "customer_email %s %s", event.Truncate(d.CustomerEmail), contracts.AddressProblem(d.CustomerEmail))
	}
	return Cancellation{OrderID: d.OrderID, CustomerEmail: d.CustomerEmail, Sequence: seq}, nil
}

// invalidData is the poison error of data inventory cannot accept.
func invalidData(env event.Envelope, format string, args ...any) error {
	return event.Poison(event.ReasonInvalidData, fmt.Errorf("%s %s: "+format, append([]any{env.Type, env.ID}, args...)...))
}
