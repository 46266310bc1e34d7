package main

import (
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// Each test kills the real inventory process (SIGKILL, from the failpoint) inside one
// failure window of its consumer, restarts it without the failpoint, and counts what is
// left: Dune's reservation, and the distinct outcome events inventory published.

type crashCase struct {
	strategy, failpoint string
	// What the database shows after the crash, before the restart.
	reservedAfterCrash, inboxAfterCrash int
	// What the restarted process leaves once it has taken the redelivered message.
	reservedAtEnd, outcomesAtEnd int
}

func crashAndRestart(t *testing.T, c crashCase) {
	t.Helper()
	e := newEnv(t)
	p := startProcess(t, e, "INVENTORY_STRATEGY", c.strategy, "BOOKSTORE_FAILPOINTS", c.failpoint+"=crash", "RELAY_ID", "relay-a")
	msg := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
	publishEvent(t, e.amqpURL, msg)
	p.WaitKilled(t)

	db := testenv.Pool(t, e.databaseURL)
	if n := reserved(t, db, dune); n != c.reservedAfterCrash {
		t.Errorf("after the crash: Dune reserved = %d, want %d", n, c.reservedAfterCrash)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM inbox"); n != c.inboxAfterCrash {
		t.Errorf("after the crash: %d inbox rows, want %d", n, c.inboxAfterCrash)
	}

	// The same relay id takes its own claims back at once after the restart.
	startProcess(t, e, "INVENTORY_STRATEGY", c.strategy, "RELAY_ID", "relay-a")
	testenv.Eventually(t, 30*time.Second, "the redelivered order handled and its outcome published", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM inbox") == 1 &&
			testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == c.outcomesAtEnd &&
			testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state <> 'published'") == 0
	})
	if n := reserved(t, db, dune); n != c.reservedAtEnd {
		t.Errorf("Dune reserved = %d, want %d", n, c.reservedAtEnd)
	}
	outcomes := distinctIDs(sut.Drain(t, e.amqpURL, outcomesQueue, time.Second))
	if len(outcomes) != c.outcomesAtEnd {
		t.Errorf("distinct outcome events published = %d, want %d", len(outcomes), c.outcomesAtEnd)
	}
	for _, m := range outcomes {
		if m.Type != contracts.StockReserved {
			t.Errorf("outcome %s, want %s", m.Type, contracts.StockReserved)
		}
	}
	if n := testenv.QueueDepth(t, e.amqpURL, broker.Queue{Name: contracts.QueueInventoryOrderPlaced}.DLQ()); n != 0 {
		t.Errorf("%d messages dead-lettered, want 0", n)
	}
}

// Killed with the inbox row, the reservation and the outcome event written and not
// committed: Postgres rolls all three back, RabbitMQ redelivers, and the restarted process
// reserves the order once.
func TestCrashBeforeCommitReservesOnceAfterRestart(t *testing.T) {
	t.Parallel()
	crashAndRestart(t, crashCase{
		strategy: "inbox", failpoint: "inventory/before-commit",
		reservedAfterCrash: 0, inboxAfterCrash: 0,
		reservedAtEnd: 2, outcomesAtEnd: 1,
	})
}

// Killed after the commit and before the ack: RabbitMQ redelivers a message whose work is
// done, and the inbox row makes the redelivery a duplicate.
func TestCrashAfterCommitReservesOnceAfterRestart(t *testing.T) {
	t.Parallel()
	crashAndRestart(t, crashCase{
		strategy: "inbox", failpoint: "inventory/after-commit",
		reservedAfterCrash: 2, inboxAfterCrash: 1,
		reservedAtEnd: 2, outcomesAtEnd: 1,
	})
}

// The same crash under check-then-process: the reservation is committed and the message
// not yet recorded, so the redelivery passes the check and reserves again, and the order
// is announced twice. This test asserts the defect.
func TestCheckThenProcessCrashAfterCommitReservesTwice(t *testing.T) {
	t.Parallel()
	crashAndRestart(t, crashCase{
		strategy: "check-then-process", failpoint: "inventory/after-commit",
		reservedAfterCrash: 2, inboxAfterCrash: 0,
		reservedAtEnd: 4, outcomesAtEnd: 2,
	})
}
