package contracts

// The failpoint names of the contracts: the places where BOOKSTORE_FAILPOINTS can make a
// service crash, fail or stall (package failpoint of the platform runs them).
const (
	OrderingBeforeCommit  = "ordering/before-commit"
	RelayAfterPublish     = "relay/after-publish"
	InventoryBeforeCommit = "inventory/before-commit"
	InventoryAfterCommit  = "inventory/after-commit"
	NotificationAfterSend = "notification/after-send"
	OrderingAfterCommit   = "ordering/after-commit"
	// InventoryBeforeReleaseCommit: a cancellation's release (the order's row, the
	// reservations deleted, reserved lowered, StockReleased in the outbox) is written
	// and not committed.
	InventoryBeforeReleaseCommit = "inventory/before-release-commit"
)

// Failpoints lists every failpoint of the contracts; a service refuses to start with any
// other name in BOOKSTORE_FAILPOINTS.
var Failpoints = []string{
	OrderingBeforeCommit, RelayAfterPublish, InventoryBeforeCommit,
	InventoryAfterCommit, NotificationAfterSend, OrderingAfterCommit,
	InventoryBeforeReleaseCommit,
}
