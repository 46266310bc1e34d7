package main

import (
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/ops"
)

// parkedCommands is what inventory parks: the orders its queue dead-lettered and the
// stock answers its relay gave up on (package ops).
//
//	inventory dlq list|replay [inventory.order-placed] [--id ID ...]
//	inventory outbox list-dead|retry-dead [--id ID ...]
var parkedCommands = ops.Service{
	Name:       "inventory",
	Queues:     []string{contracts.QueueInventoryOrderPlaced},
	Outbox:     true,
	Migrations: stock.Migrations,
}
