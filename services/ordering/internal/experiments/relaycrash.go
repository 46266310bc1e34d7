package experiments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// RelayCrashResult is the measurement of RelayCrashAfterConfirm.
type RelayCrashResult struct {
	StateAfterCrash string // the outbox row's state once the first relay was gone
	Orders          int    // orders placed: a correct design gives every copy of one its one id
	Copies          int    // messages in the queue at the end
	MessageIDs      int    // distinct message ids among them
	IDIsTheRowID    bool   // every copy's message id is the outbox row's id
	Redelivered     []bool // each copy's redelivered flag, in queue order
}

func (r RelayCrashResult) String() string {
	second := false
	if len(r.Redelivered) > 1 {
		second = r.Redelivered[1]
	}
	return fmt.Sprintf("[outbox] relay crash after confirm -> copies delivered: %d, message ids: %s, redelivered on the second: %t %s",
		r.Copies, wanted(r.MessageIDs, r.Orders), second,
		verdict(r.MessageIDs == r.Orders && r.IDIsTheRowID, "copies a consumer cannot tell from a new order"))
}

// RelayCrashAfterConfirm: ordering's own use case writes Ada's order and its outbox row;
// the real relay (outbox.Relay) publishes the row, has the broker's confirm, and stops at
// its failpoint (contracts.RelayAfterPublish) before marking it, as a process killed
// there would. A relay restarted under the same relay id takes its claim back at once
// and publishes the row again. The queue holds two messages with one id, and the
// second's redelivered flag is false: to the broker it is a new message, not a
// redelivery, so only the id tells a consumer it has seen it.
func (l *Lab) RelayCrashAfterConfirm(ctx context.Context) (RelayCrashResult, error) {
	oneAtATime.Lock()
	defer oneAtATime.Unlock()
	var r RelayCrashResult
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	ada, err := l.service().PlaceOrder(ctx, "", adasOrder())
	if err != nil {
		return r, fmt.Errorf("place the order: %w", err)
	}
	var rowID string
	if err := l.Pool.QueryRow(ctx, "SELECT id::text FROM outbox WHERE aggregate_id = $1", ada.Order.ID.String()).Scan(&rowID); err != nil {
		return r, fmt.Errorf("read the outbox row: %w", err)
	}

	const relayID = "ordering-experiments"
	if err := failpoint.Configure(contracts.RelayAfterPublish+"=error", contracts.Failpoints); err != nil {
		return r, err
	}
	n, err := l.relayOnce(ctx, relayID, contracts.RelayAfterPublish)
	_ = failpoint.Configure("", contracts.Failpoints)
	if n != 1 || !errors.Is(err, failpoint.ErrInjected) {
		return r, fmt.Errorf("first relay: want one row published and the stop at %s, got %d rows, %v", contracts.RelayAfterPublish, n, err)
	}
	if err := l.Pool.QueryRow(ctx, "SELECT state FROM outbox WHERE id = $1::uuid", rowID).Scan(&r.StateAfterCrash); err != nil {
		return r, fmt.Errorf("read the outbox row: %w", err)
	}

	if err := l.relayUntilPublished(ctx, relayID, rowID); err != nil {
		return r, err
	}
	if r.Orders, err = l.count(ctx, "SELECT count(*) FROM orders"); err != nil {
		return r, err
	}
	copies, err := l.copies(ctx)
	if err != nil {
		return r, err
	}
	r.Copies = len(copies)
	ids := map[string]bool{}
	r.IDIsTheRowID = len(copies) > 0
	for _, c := range copies {
		ids[c.MessageId] = true
		r.IDIsTheRowID = r.IDIsTheRowID && c.MessageId == rowID
		r.Redelivered = append(r.Redelivered, c.Redelivered)
	}
	r.MessageIDs = len(ids)
	return r, nil
}

// relayOnce runs one batch of a relay under relayID whose failpoint between the confirms
// and the mark is afterPublish, then drops the relay and its connection, as a process
// that died there would leave them.
func (l *Lab) relayOnce(ctx context.Context, relayID, afterPublish string) (int, error) {
	pub, closePub := newPublisher(l.AMQPURL)
	defer closePub()
	relay, err := outbox.NewRelay(l.Pool, pub, l.Tel, outbox.Config{ID: relayID, AppID: "ordering", AfterPublishFailpoint: afterPublish})
	if err != nil {
		return 0, err
	}
	return relay.RunOnce(ctx)
}

// relayUntilPublished runs a relay under relayID, as a restarted process does, until the
// outbox row rowID is published.
func (l *Lab) relayUntilPublished(ctx context.Context, relayID, rowID string) error {
	pub, closePub := newPublisher(l.AMQPURL)
	defer closePub()
	relay, err := outbox.NewRelay(l.Pool, pub, l.Tel, outbox.Config{
		ID: relayID, AppID: "ordering", PollInterval: 20 * time.Millisecond, BackoffBase: 20 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- relay.Run(rctx) }()
	defer func() { stop(); <-stopped }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var state string
		if err := l.Pool.QueryRow(ctx, "SELECT state FROM outbox WHERE id = $1::uuid", rowID).Scan(&state); err != nil {
			return fmt.Errorf("restarted relay: %w", err)
		}
		if state == "published" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restarted relay: the row is still %s after 20s", state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
