// Package orders is the ordering service's domain: placing an order and following its
// stock outcome. Each use case is one Postgres transaction; read PlaceOrder first.
package orders

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
)

// Status is where an order is in its life: pending until inventory answers.
type Status string

const (
	Pending   Status = "pending"
	Confirmed Status = "confirmed"
	Rejected  Status = "rejected"
	// Cancelled: the customer cancelled a pending or confirmed order (CancelOrder).
	Cancelled Status = "cancelled"
)

// Line is one book of an order.
type Line struct {
	BookID   uuid.UUID `json:"book_id"`
	Quantity int       `json:"quantity"`
}

// Order is the order as the API shows it.
type Order struct {
	ID            uuid.UUID `json:"id"`
	CustomerEmail string    `json:"customer_email"`
	Status        Status    `json:"status"`
	Lines         []Line    `json:"lines"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// History is what happened to the order, oldest first: placed, then confirmed or
	// rejected, then cancelled, each at most once.
	History []Step `json:"history"`
}

// Step is one entry of an order's history.
type Step struct {
	Event string    `json:"event"` // placed, confirmed, rejected or cancelled
	At    time.Time `json:"at"`
}

// PlaceOrderRequest is the body of POST /orders.
type PlaceOrderRequest struct {
	CustomerEmail string           `json:"customer_email"`
	Lines         []PlaceOrderLine `json:"lines"`
}

// PlaceOrderLine is a line as the client sends it. The book id stays a string until Valid
// has checked it, so a malformed id is reported as lines[i].book_id, not as unreadable JSON.
type PlaceOrderLine struct {
	BookID   string `json:"book_id"`
	Quantity int    `json:"quantity"`
}

// lines returns the request's lines; call it only after Valid returned no problems.
func (r PlaceOrderRequest) lines() []Line {
	out := make([]Line, len(r.Lines))
	for i, l := range r.Lines {
		out[i] = Line{BookID: uuid.MustParse(l.BookID), Quantity: l.Quantity}
	}
	return out
}

// Valid returns a problem per invalid field, keyed by its JSON path; empty when valid.
// The customer's email is checked by contracts.AddressProblem, which is stricter than
// the email provider's rule, so an order is not taken for an address its email would be
// refused for; the limits of its lines are contracts.MaxLines and contracts.MaxQuantity, which
// inventory checks too. Too many lines is one problem, and no line is checked.
func (r PlaceOrderRequest) Valid() map[string]string {
	problems := map[string]string{}
	switch {
	case r.CustomerEmail == "":
		problems["customer_email"] = "is required"
	default:
		if p := contracts.AddressProblem(r.CustomerEmail); p != "" {
			problems["customer_email"] = p
		}
	}
	switch {
	case len(r.Lines) == 0:
		problems["lines"] = "must have at least one line"
	case len(r.Lines) > contracts.MaxLines:
		// The first limit met is the answer: checking each of 21,000 lines made 42,000
		// errors to list, from a 63 KB body. Fewer lines will get their own checks.
		problems["lines"] = fmt.Sprintf("must have at most %d lines", contracts.MaxLines)
		return problems
	}
	seen := map[uuid.UUID]int{}
	for i, l := range r.Lines {
		path := fmt.Sprintf("lines[%d]", i)
		id, err := uuid.Parse(l.BookID)
		switch {
		case l.BookID == "":
			problems[path+".book_id"] = "is required"
		case err != nil || id.String() != strings.ToLower(l.BookID):
			problems[path+".book_id"] = "must be a UUID such as 018f2b1e-0000-7000-8000-000000000001"
		default:
			if j, dup := seen[id]; dup {
				problems[path+".book_id"] = fmt.Sprintf("repeats lines[%d].book_id; order each book once with its total quantity", j)
			} else {
				seen[id] = i
			}
		}
		if l.Quantity < 1 || l.Quantity > contracts.MaxQuantity {
			problems[path+".quantity"] = fmt.Sprintf("must be between 1 and %d", contracts.MaxQuantity)
		}
	}
	return problems
}

// Errors of the use cases, mapped to HTTP statuses by the API.
var (
	ErrNotFound = errors.New("order not found")
	// ErrKeyInFlight means another request with this Idempotency-Key is being processed.
	ErrKeyInFlight = idempotency.ErrInFlight
	// ErrKeyMismatch means this Idempotency-Key was used before with a different body.
	ErrKeyMismatch = idempotency.ErrMismatch
)

// NotCancellableError is the refusal to cancel a rejected or already cancelled order:
// POST /orders/{id}/cancel answers 409 not-cancellable.
type NotCancellableError struct{ Status Status }

func (e NotCancellableError) Error() string {
	return fmt.Sprintf("the order is %s; only a pending or confirmed order can be cancelled", e.Status)
}
