package contracts

import (
	"time"

	"github.com/google/uuid"
)

// Event types: the routing keys on the Exchange. The version suffix is part of the
// type, so a consumer that meets a version it does not know dead-letters it instead of
// misreading it.
const (
	OrderPlaced   = "ordering.order-placed.v1"
	StockReserved = "inventory.stock-reserved.v1"
	StockRejected = "inventory.stock-rejected.v1"
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

// Limits of an order. Ordering refuses an order outside them, so inventory knows an
// event outside them was not written by ordering, and no retry can make it valid.
const (
	MaxLines    = 50
	MaxQuantity = 100
)
