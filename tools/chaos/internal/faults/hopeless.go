package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// HopelessParkLimit is hopeless's bound: from the message's first delivery until it is
// in its dead-letter queue. Notification gives an email up at the provider's first 422
// (a refusal of the request itself) and dead-letters the message at once, so the bound
// is one delivery: a handler's provider timeout, and one of notification's paced retries
// (up to 30 s) for a delivery another fault interrupts. The wait in the queue before that
// delivery is not counted: it is the backlog's, which the liveness table measures, and a
// soak's heaviest window keeps a message queued longer than this bound.
const HopelessParkLimit = 45 * time.Second

// hopelessDeliveryLimit bounds the wait for the message's first delivery.
const hopelessDeliveryLimit = 3 * time.Minute

// hopelessQueue is the queue hopeless feeds: notification's, whose handler depends on a
// third party that can refuse one message for good while it serves every other one.
const hopelessQueue = contracts.QueueNotificationStockEvents

// HopelessKind is the PoisonMessage kind a hopeless message is recorded under: the
// checker expects it in its dead-letter queue exactly once, as it expects poison.
const HopelessKind = "hopeless"

// hopelessRecipient is the address the provider refuses for good for fault id.
func hopelessRecipient(id int) string { return fmt.Sprintf("hopeless-%d@chaos.example", id) }

// hopeless publishes one valid stock event, for an order of its own, whose email the
// provider refuses for good: its refuse_to fault names the recipient (422
// recipient-refused), while every other send is served. Every dependency is healthy and
// the message is valid, yet its handler fails every time: it must be parked in the
// dead-letter queue (notification gives the email up and dead-letters it), not
// requeued for ever, and not take anything else down with it. It is recorded as an
// injected message of kind HopelessKind, so invariant 6 expects it in the dead-letter
// queue exactly once. The check: it is there within HopelessParkLimit.
func (in *Injector) hopeless(ctx context.Context, f *check.Fault) {
	var held bounded
	defer held.done()
	in.lockTopo(false) // no poison meanwhile: the dead-letter queue's growth is this message's
	held.hold(in.unlockTopo)
	ctx = context.WithoutCancel(ctx)
	// The provider keeps its faults in memory: a provider restarted meanwhile would
	// forget the refusal and send the email.
	if !in.guard.protect(protectWait, "emailprovider") {
		in.record(f, false, fmt.Sprintf("skipped: other faults held the email provider for %v", protectWait))
		return
	}
	held.hold(func() { in.guard.unprotect("emailprovider") })
	recipient := hopelessRecipient(f.ID)
	in.mu.Lock()
	in.refused = append(in.refused, recipient)
	state := in.provider
	if in.held > 0 {
		state = providerFaults{}
	}
	in.mu.Unlock()
	if err := in.putProviderFaults(ctx, state); err != nil {
		in.fail(f, false, "refuse_to: "+err.Error())
		return
	}
	var dlq string
	for _, q := range contracts.Topology.Queues {
		if q.Name == hopelessQueue {
			dlq = q.DLQ()
		}
	}
	before, err := in.inject.readyCount(dlq)
	if err != nil {
		in.fail(f, false, "dead-letter queue: "+err.Error())
		return
	}
	// An unconfirmed publish (the harness's connection lost meanwhile; the second
	// short run lost one so) may or may not have reached the queue: the consumer's
	// record of its order tells. One that did is injected; one that did not is tried
	// again with a message of its own.
	var p hopelessMessage
	for try := 0; try < 3; try++ {
		p, err = in.inject.hopeless(ctx, hopelessQueue, recipient)
		if err == nil {
			break
		}
		if errors.Is(err, errNoQueue) {
			// Another fault's queue was not declared again (its own check says so): the
			// message is not in the queue, and nothing is injected.
			in.record(f, false, "skipped: "+err.Error())
			return
		}
		if p.MessageID != "" && in.arrived(ctx, p.orderID) {
			in.inject.recordInjected(p.PoisonMessage)
			err = nil
			break
		}
	}
	if err != nil {
		in.record(f, false, "publish: "+err.Error())
		return
	}
	published := time.Now()
	held.from(published, hopelessDeliveryLimit)
	in.begin(f)
	var delivered, parked time.Time
	status := ""
	for deadline, asked := published.Add(hopelessDeliveryLimit), (time.Time{}); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		held.check()
		if n, err := in.inject.readyCount(dlq); err == nil && n > before {
			parked = time.Now()
			break
		}
		if delivered.IsZero() && time.Since(asked) >= time.Second {
			asked = time.Now()
			if delivered = firstDelivery(ctx, in.sys, p.orderID); !delivered.IsZero() {
				deadline = delivered.Add(2 * time.Minute)
				held.from(delivered, HopelessParkLimit)
			}
		}
	}
	if delivered.IsZero() {
		delivered = firstDelivery(ctx, in.sys, p.orderID)
	}
	// A read that failed is said as such: under a loaded database "no record" misread as
	// "not delivered" sent the two-hour soak's analysis after a delivery never spent.
	if rec, err := notificationStatus(ctx, in.sys, p.orderID); err == nil {
		status = rec
	} else if !errors.Is(err, errNoRecord) {
		status = "unread (" + err.Error() + ")"
	}
	in.record(f, true, fmt.Sprintf("%s for order %s to %s (refused by the provider), message %s; its email record %s", p.typ, p.orderID, recipient, p.MessageID, cmp.Or(status, "not found")))
	in.mu.Lock()
	f.End = f.Start // the fault is the publish
	in.mu.Unlock()
	c := hopelessVerdict(p.MessageID, dlq, cmp.Or(status, "not found"), published, delivered, parked)
	in.setCheck(f, in.unlessOutage(c, published, time.Now()))
}

// hopelessVerdict is hopeless's check of a message published at published, first
// delivered at delivered and parked at parked (zero: not seen): parked within
// HopelessParkLimit of its first delivery, or of its publish when no delivery was seen.
func hopelessVerdict(id, dlq, status string, published, delivered, parked time.Time) check.FaultCheck {
	if parked.IsZero() {
		what := "not delivered"
		if !delivered.IsZero() {
			what = fmt.Sprintf("delivered after %.1fs", delivered.Sub(published).Seconds())
		}
		return check.FaultCheck{Checked: true, Drain: -1, Violation: check.HopelessNotParked,
			Detail: fmt.Sprintf("message %s %s and not in %s %v after it was published (its email record %s)", id, what, dlq, time.Since(published).Round(time.Second), status)}
	}
	from, since := delivered, fmt.Sprintf("its first delivery (it waited %.1fs for it)", delivered.Sub(published).Seconds())
	if delivered.IsZero() {
		from, since = published, fmt.Sprintf("its publish (no delivery seen; its email record %s)", status)
	}
	if took := parked.Sub(from); took > HopelessParkLimit {
		return check.FaultCheck{Checked: true, Drain: parked.Sub(published), Violation: check.HopelessNotParked,
			Detail: fmt.Sprintf("message %s parked in %s %.1fs after %s, bound %v", id, dlq, took.Seconds(), since, HopelessParkLimit)}
	}
	return check.FaultCheck{Checked: true, Drain: parked.Sub(published),
		Detail: fmt.Sprintf("parked in %s %.1fs after %s", dlq, parked.Sub(from).Seconds(), since)}
}

// firstDelivery returns when notification first took order's message: its email
// record's creation (zero while it has none).
func firstDelivery(ctx context.Context, sys *harness.System, order string) time.Time {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var at time.Time
	_ = sys.DBs["notification"].QueryRow(ctx, `SELECT created_at FROM notifications WHERE order_id = $1 ORDER BY created_at LIMIT 1`, order).Scan(&at)
	return at
}

// notificationStatus returns the status of the email record of order.
func notificationStatus(ctx context.Context, sys *harness.System, order string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p := sys.ProcessesOf("notification")[0]
	records, err := harness.GetAll[check.NotificationRecord](ctx, "http://"+p.HTTPAddr+"/notifications?order_id="+url.QueryEscape(order))
	if err != nil {
		return "", err
	}
	if len(records) == 0 {
		return "", errNoRecord
	}
	return records[0].Status, nil
}

// errNoRecord is notificationStatus's answer for an order notification has no record of.
var errNoRecord = errors.New("no record")

func cmpOrErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// hopelessMessage is a hopeless message as published, with what it is about.
type hopelessMessage struct {
	check.PoisonMessage
	typ, orderID string
}

// hopeless publishes to queue (through the default exchange, as poison goes: through the
// events exchange ordering would get it too) a copy of a stock event inventory has
// published, made an event of its own: a new id, a new order (subject and order_id),
// the recipient given. It is valid in every way the consumer checks. It is recorded as
// injected, of kind HopelessKind.
func (m *Messages) hopeless(ctx context.Context, queue, recipient string) (hopelessMessage, error) {
	raw, err := collectStrings(ctx, m.sys.DBs["inventory"], `
		SELECT envelope::text FROM outbox WHERE event_type IN ('`+contracts.StockReserved+`', '`+contracts.StockRejected+`')
		ORDER BY created_at DESC LIMIT 1`)
	if err != nil {
		return hopelessMessage{}, err
	}
	if len(raw) == 0 {
		return hopelessMessage{}, errors.New("inventory has written no stock event yet")
	}
	id, order := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	body, typ, err := hopelessBody(raw[0], id, order, recipient)
	if err != nil {
		return hopelessMessage{}, err
	}
	p := check.PoisonMessage{Queue: queue, Kind: HopelessKind, MessageID: id, Body: body, At: time.Now()}
	msg := hopelessMessage{PoisonMessage: p, typ: typ, orderID: order}
	if err := m.publish(ctx, "", queue, amqp.Publishing{MessageId: id, Type: typ, ContentType: event.ContentType, AppId: "chaos", Body: body}); err != nil {
		return msg, err // published or not: the caller finds out
	}
	m.recordInjected(p)
	return msg, nil
}

// recordInjected adds p to the messages the checker expects in the dead-letter queues.
func (m *Messages) recordInjected(p check.PoisonMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.injected = append(m.injected, p)
}

// arrived reports whether notification has a record of order within 15 s: a hopeless
// message whose publish was not confirmed reached the queue after all.
func (in *Injector) arrived(ctx context.Context, order string) bool {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if _, err := notificationStatus(ctx, in.sys, order); err == nil {
			return true
		}
	}
	return false
}

// hopelessBody makes the envelope raw an event of its own: id, subject and order_id
// replaced, customer_email the recipient; everything else as inventory wrote it.
func hopelessBody(raw, id, order, recipient string) (body []byte, typ string, err error) {
	var env map[string]any
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		return nil, "", err
	}
	data, ok := env["data"].(map[string]any)
	if !ok {
		return nil, "", errors.New("stock event without data")
	}
	typ, _ = env["type"].(string)
	if !slices.Contains([]string{contracts.StockReserved, contracts.StockRejected}, typ) {
		return nil, "", fmt.Errorf("stock event of type %q", typ)
	}
	env["id"], env["subject"] = id, order
	data["order_id"], data["customer_email"] = order, recipient
	body, err = json.Marshal(env)
	return body, typ, err
}
