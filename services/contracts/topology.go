package contracts

import "github.com/bookstore-go/bookstore/services/platform/broker"

// The exchanges and queues of the contracts.
const (
	Exchange           = "bookstore.events"
	DeadLetterExchange = "bookstore.dlx"

	QueueInventoryOrderPlaced    = "inventory.order-placed"
	QueueOrderingStockEvents     = "ordering.stock-events"
	QueueNotificationStockEvents = "notification.stock-events"
)

// Topology is the queue table of the contracts: every queue, and the event types bound
// to it. Every service declares all of it on start, and the definitions file of docker
// compose holds the same (deploy's tests compare them).
var Topology = broker.Topology{
	Exchange:           Exchange,
	DeadLetterExchange: DeadLetterExchange,
	Queues: []broker.Queue{
		// Both versions of OrderPlaced while producers migrate from v1 to v2.
		{Name: QueueInventoryOrderPlaced, Bindings: []string{OrderPlaced, OrderPlacedV2}},
		{Name: QueueOrderingStockEvents, Bindings: []string{StockReserved, StockRejected}},
		{Name: QueueNotificationStockEvents, Bindings: []string{StockReserved, StockRejected}},
	},
}
