package main

import (
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ops"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
)

// parkedCommands is what ordering parks: the stock events its queue dead-lettered and
// the OrderPlaced events its relay gave up on (package ops).
//
//	ordering dlq list|replay [ordering.stock-events] [--id ID ...]
//	ordering outbox list-dead|retry-dead [--id ID ...]
var parkedCommands = ops.Service{
	Name:   "ordering",
	Queues: []string{contracts.QueueOrderingStockEvents},
	Outbox: true,
	// The outbox is the platform's table; the commands read nothing of ordering's own.
	Migrations: []pgdb.Migrations{{FS: schema.Platform, VersionTable: "goose_platform_version"}},
}
