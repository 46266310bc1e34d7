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
// to it. The definitions file of docker compose holds all of it (deploy's tests compare
// them); each service declares only its own part, below.
var Topology = broker.Topology{
	Exchange:           Exchange,
	DeadLetterExchange: DeadLetterExchange,
	Queues: []broker.Queue{
		// Both versions of OrderPlaced while producers migrate from v1 to v2, and
		// OrderCancelled on the same queue: an order's placement and its cancellation meet
		// one consumer, which orders them by their sequence (docs/cancellation.md). The
		// queue keeps its name so that a running system needs no migration.
		{Name: QueueInventoryOrderPlaced, Bindings: []string{OrderPlaced, OrderPlacedV2, OrderCancelled}},
		// StockReleased ends a cancelled order's history in ordering.
		{Name: QueueOrderingStockEvents, Bindings: []string{StockReserved, StockRejected, StockReleased}},
		// StockReleased asks for the "order cancelled" email.
		{Name: QueueNotificationStockEvents, Bindings: []string{StockReserved, StockRejected, StockReleased}},
	},
}

// The producers of the contracts: the broker user of the one service that may publish
// the events each queue takes, which each message of theirs carries as its AMQP user-id
// (broker.Publisher sets it; RabbitMQ refuses a user-id other than the login). Ordering
// publishes the order events, inventory the stock events; a consumer dead-letters any
// other publisher's delivery (consumer.Config.Producer). The users are those of
// deploy/rabbitmq/definitions.json, the k8s overlays and `make run`; CONSUMER_PRODUCER
// names another where the services log in otherwise (the tests' one user).
const (
	ProducerOrderEvents = "ordering"
	ProducerStockEvents = "inventory"
)

// Producers maps each queue to the broker user whose events it takes.
var Producers = map[string]string{
	QueueInventoryOrderPlaced:    ProducerOrderEvents,
	QueueOrderingStockEvents:     ProducerStockEvents,
	QueueNotificationStockEvents: ProducerStockEvents,
}

// What each service declares on start, and all its broker user may configure (deploy's
// tests check the definitions file's permissions against these): both exchanges, and the
// queue it consumes with its dead-letter queue and bindings. A publisher declares
// PublisherTopology, the exchanges alone: a queue exists once the deployment (compose's
// definitions, the production overlay's topology objects) or its consumer has declared
// it, and until every queue bound to an event's type exists, the relay holds the event
// (broker.ErrMissingQueue, docs/outbox.md).
var (
	PublisherTopology    = Topology.Subset()
	OrderingTopology     = Topology.Subset(QueueOrderingStockEvents)
	InventoryTopology    = Topology.Subset(QueueInventoryOrderPlaced)
	NotificationTopology = Topology.Subset(QueueNotificationStockEvents)
)
