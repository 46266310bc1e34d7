package main

import (
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ops"
)

// parkedCommands is what notification parks: the stock events its queue dead-lettered
// (package ops). It has no outbox. A replayed event whose email was sent is a
// duplicate; one whose email failed for good (its record 'failed' after
// NOTIFICATION_MAX_ATTEMPTS) goes back to the DLQ, because the record, not the message,
// remembers that failure.
//
//	notification dlq list|replay [notification.stock-events] [--id ID ...]
var parkedCommands = ops.Service{
	Name:   "notification",
	Queues: []string{contracts.QueueNotificationStockEvents},
}
