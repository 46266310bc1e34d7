package contracts

import (
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
)

// Event types: the routing keys on the Exchange. The version suffix is part of the
// type, so a consumer that meets a version it does not know dead-letters it instead of
// misreading it. The outbox stores the same number in its schema_version column
// (outbox.SchemaVersion reads it from the suffix).
const (
	OrderPlaced = "ordering.order-placed.v1"
	// OrderPlacedV2 is OrderPlaced with the customer as an object (OrderPlacedV2Data).
	// Ordering publishes v1 unless ORDERING_ORDER_PLACED_VERSION=2; inventory reads both
	// while the migration runs (docs/schema-evolution.md).
	OrderPlacedV2 = "ordering.order-placed.v2"
	StockReserved = "inventory.stock-reserved.v1"
	StockRejected = "inventory.stock-rejected.v1"
	// StockReleased: inventory applied an order's cancellation and gave back what it had
	// reserved for it (its lines; none when it had reserved nothing). One per cancelled
	// order; its sequence follows the reservation's outcome event, or is 1 when the
	// cancellation arrived before the placement.
	StockReleased = "inventory.stock-released.v1"
	// OrderCancelled: a customer cancelled a pending or confirmed order. Its sequence is
	// the order's version after the cancellation, always above its OrderPlaced's (1).
	OrderCancelled = "ordering.order-cancelled.v1"
)

// The CloudEvents sources of the services that produce events.
const (
	OrderingSource  = "bookstore/ordering"
	InventorySource = "bookstore/inventory"
)

// Line is one book and quantity of an order, as events carry it.
type Line struct {
	BookID   uuid.UUID `json:"book_id"`
	Quantity int       `json:"quantity"`
}

// OrderPlacedData is the data of ordering.order-placed.v1.
type OrderPlacedData struct {
	OrderID       uuid.UUID `json:"order_id"`
	CustomerEmail string    `json:"customer_email"`
	Lines         []Line    `json:"lines"`
	PlacedAt      time.Time `json:"placed_at"`
}

// OrderPlacedV2Data is the data of ordering.order-placed.v2: v1 with the flat
// customer_email moved into a customer object, so that what ordering knows about a
// customer travels together. The change is breaking both ways, which is why it is a new
// type and not a changed v1: a v1 consumer reads data strictly and refuses the unknown
// "customer" (and would miss its required customer_email), and a v2 consumer refuses
// v1's "customer_email". customer.email is required; customer.name is optional, and
// ordering does not send it yet (an order has no name).
type OrderPlacedV2Data struct {
	OrderID  uuid.UUID `json:"order_id"`
	Customer Customer  `json:"customer"`
	Lines    []Line    `json:"lines"`
	PlacedAt time.Time `json:"placed_at"`
}

// Customer is who placed an order, as ordering.order-placed.v2 carries it.
type Customer struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
}

// OrderCancelledData is the data of ordering.order-cancelled.v1. The customer's address
// travels with it so that notification can write the cancellation email without asking.
type OrderCancelledData struct {
	OrderID       uuid.UUID `json:"order_id"`
	CustomerEmail string    `json:"customer_email"`
	CancelledAt   time.Time `json:"cancelled_at"`
}

// StockReservedData is the data of inventory.stock-reserved.v1.
type StockReservedData struct {
	OrderID       uuid.UUID `json:"order_id"`
	CustomerEmail string    `json:"customer_email"`
	Lines         []Line    `json:"lines"`
}

// StockRejectedData is the data of inventory.stock-rejected.v1.
type StockRejectedData struct {
	OrderID       uuid.UUID `json:"order_id"`
	CustomerEmail string    `json:"customer_email"`
	Lines         []Line    `json:"lines"`
	Reason        string    `json:"reason"`
}

// StockReleasedData is the data of inventory.stock-released.v1: the lines released, []
// when the order held no reservation (rejected, or cancelled before inventory saw it).
type StockReleasedData struct {
	OrderID       uuid.UUID `json:"order_id"`
	CustomerEmail string    `json:"customer_email"`
	Lines         []Line    `json:"lines"`
}

// Limits of an order. Ordering refuses an order outside them, so inventory knows an
// event outside them was not written by ordering, and no retry can make it valid.
const (
	MaxLines    = 50
	MaxQuantity = 100
)

// Limits of an event's free text, which no HTTP request sets: a consumer refuses an event
// whose text is longer, or holds a control or invisible formatting character (the rule
// AddressProblem applies to an address), as data no producer of Bookstore writes.
const (
	MaxNameLen   = 200 // OrderPlacedV2's customer.name
	MaxReasonLen = 500 // StockRejected's reason
)

// TextProblem says what is wrong with s as an event's free text of at most max bytes
// (MaxNameLen, MaxReasonLen), or "" when nothing is.
func TextProblem(s string, max int) string {
	if len(s) > max {
		return "must be at most " + strconv.Itoa(max) + " bytes"
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar {
			return "must not contain control or invisible formatting characters"
		}
	}
	return ""
}

// MaxBooks is the most books inventory's catalogue holds: PUT /books/{id} refuses a new
// book beyond it (409 catalogue-full), so an administrator's script gone wrong cannot grow
// the catalogue, and every GET /books walk, without bound.
const MaxBooks = 10_000

// OrderIDProblem says what is wrong with the order id an order's event carries in its
// data, checked against the envelope's subject, or "" when nothing is. Every event of an
// order is published under the order's id as its subject: the subject keys the event's
// place in the order's sequence and the data's id says which order the work is for, so a
// consumer that met the two apart could not tell which order it is answering.
func OrderIDProblem(orderID uuid.UUID, subject string) string {
	switch {
	case orderID == uuid.Nil:
		return "order_id is missing"
	case orderID.String() != subject:
		if len(subject) > 64 {
			subject = strings.ToValidUTF8(subject[:64], "") + "…"
		}
		return "order_id " + orderID.String() + " does not match subject " + strconv.Quote(subject)
	}
	return ""
}
