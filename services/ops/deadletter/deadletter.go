// Package deadletter lets an operator see what a queue dead-lettered (poison, or past
// x-delivery-limit) and move it back once the cause is fixed. A dead letter waits in
// <queue>.dlq until someone looks, and the order it carries stays unanswered meanwhile.
//
// Replay never loses a message: it acks the original only after the broker confirmed the
// copy, so a crash in between leaves it in both queues, and the inbox drops the second
// as a duplicate. Which queues a service may touch is the caller's business.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// MaxMessages bounds how many messages List and Replay hold at once. A dead-letter queue
// deeper than this is read and replayed in parts: Replay moves at most this many per call.
const MaxMessages = 10_000

// ConfirmTimeout bounds the wait for the broker's confirm of one replayed message.
const ConfirmTimeout = 10 * time.Second

// NackRetries is how often Replay publishes a copy the broker nacked before it gives up
// and leaves the rest in the DLQ: a quorum queue without a leader for a moment (a node
// restarting, a queue declared a moment ago) nacks, and takes the copy a little later.
const NackRetries = 4

// ErrNotFound is returned by Replay when an asked-for message id is not in the
// dead-letter queue. Nothing is moved then.
var ErrNotFound = errors.New("not in the dead-letter queue")

// Message is one dead-lettered message, as List reports it.
type Message struct {
	ID         string    // the AMQP message-id: the event's id; empty if the publisher set none
	Type       string    // the AMQP type: the event type
	RoutingKey string    // the routing key it was published with, before it was dead-lettered
	Reason     string    // rejected (poison), delivery_limit (failed too often), expired or maxlen
	Count      int64     // how many times it was dead-lettered from the queue
	FirstDeath time.Time // when it was first dead-lettered from the queue
	Size       int       // body bytes
}

// DLQ names the dead-letter queue of queue.
func DLQ(queue string) string { return broker.Queue{Name: queue}.DLQ() }

// List returns the messages in queue's dead-letter queue, oldest first, and leaves them
// there: it takes each one without acknowledging it and returns them all at the end.
// The broker counts the look as a delivery (x-delivery-count in the DLQ grows), which
// Replay does not carry over; the DLQ's own delivery limit (broker.DeadLetterDeliveryLimit)
// is what keeps a dead letter through any number of looks on RabbitMQ 4, whose default
// of 20 would drop it. A message dead-lettered while List runs is not in the list.
func List(ctx context.Context, ch *amqp.Channel, queue string) ([]Message, error) {
	held, err := take(ctx, ch, DLQ(queue))
	defer release(ch, held)
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(held))
	for i, d := range held {
		out[i] = describe(d, queue)
	}
	return out, nil
}

// Replay moves messages from queue's dead-letter queue back to queue: all of them, or only
// those whose message id is in ids. It returns how many it moved; an id not in the
// dead-letter queue fails the call before anything moves.
//
// Each copy goes to the default exchange with routing key queue (that queue alone),
// mandatory and confirmed, with its body and properties as they were; only after the
// confirm is the original acked, and a nacked copy is tried NackRetries times. The rest
// stay in the DLQ in their order. Give Replay a channel of its own (it sets confirm mode
// and listens for returns) and close it afterwards.
func Replay(ctx context.Context, ch *amqp.Channel, queue string, ids ...string) (int, error) {
	dlq := DLQ(queue)
	// A typo or a deleted queue must fail here, not as a returned message later.
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		return 0, fmt.Errorf("replay: queue %s: %w", queue, err)
	}
	if err := ch.Confirm(false); err != nil {
		return 0, fmt.Errorf("replay: confirm mode: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))

	held, err := take(ctx, ch, dlq)
	settled := make([]bool, len(held))
	defer func() { release(ch, unsettled(held, settled)) }()
	if err != nil {
		return 0, err
	}

	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if missing := absent(want, held); len(missing) > 0 {
		return 0, fmt.Errorf("replay from %s: %w: %s", dlq, ErrNotFound, strings.Join(missing, ", "))
	}

	moved := 0
	for i, d := range held {
		if len(want) > 0 && !want[d.MessageId] {
			continue
		}
		err := republish(ctx, ch, returns, queue, d)
		for attempt := 1; errors.Is(err, broker.ErrNacked) && attempt < NackRetries; attempt++ {
			if !backoff.Sleep(ctx, backoff.Delay(100*time.Millisecond, time.Second, attempt)) {
				break
			}
			err = republish(ctx, ch, returns, queue, d)
		}
		if err != nil {
			return moved, fmt.Errorf("replay %s to %s: %w", label(d), queue, err)
		}
		// Confirmed: the queue has the copy. Dying before this ack leaves the original in
		// the DLQ as well; replayed again, it is a duplicate the inbox drops.
		if err := d.Ack(false); err != nil {
			return moved, fmt.Errorf("replay %s: ack the dead-lettered copy: %w", label(d), err)
		}
		settled[i] = true
		moved++
	}
	return moved, nil
}

// take gets every message of dlq (up to MaxMessages) without acknowledging any. Until they
// are acked or released, no one else sees them; if the channel dies, the broker returns
// them to dlq by itself.
func take(ctx context.Context, ch *amqp.Channel, dlq string) ([]amqp.Delivery, error) {
	var held []amqp.Delivery
	for len(held) < MaxMessages {
		if err := ctx.Err(); err != nil {
			return held, err
		}
		d, ok, err := ch.Get(dlq, false)
		if err != nil {
			return held, fmt.Errorf("read %s: %w", dlq, err)
		}
		if !ok {
			break
		}
		held = append(held, d)
	}
	return held, nil
}

// release returns held messages to their queue (basic.nack, requeue), in one frame: a
// nack with multiple set covers every unsettled delivery up to the last one's tag.
func release(ch *amqp.Channel, held []amqp.Delivery) {
	if len(held) == 0 || ch.IsClosed() {
		return // a closed channel's deliveries are back in their queue already
	}
	_ = ch.Nack(held[len(held)-1].DeliveryTag, true, true)
}

// unsettled returns the held deliveries not yet acked, in order.
func unsettled(held []amqp.Delivery, settled []bool) []amqp.Delivery {
	var out []amqp.Delivery
	for i, d := range held {
		if !settled[i] {
			out = append(out, d)
		}
	}
	return out
}

// absent lists the wanted ids that no held message carries.
func absent(want map[string]bool, held []amqp.Delivery) []string {
	var missing []string
	for id := range want {
		if !slices.ContainsFunc(held, func(d amqp.Delivery) bool { return d.MessageId == id }) {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	return missing
}

// republish publishes d's copy to queue and waits for the broker to confirm it.
func republish(ctx context.Context, ch *amqp.Channel, returns <-chan amqp.Return, queue string, d amqp.Delivery) error {
	ctx, cancel := context.WithTimeout(ctx, ConfirmTimeout)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, copyOf(d))
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("waiting for confirm: %w", err)
	}
	if !acked {
		return broker.ErrNacked
	}
	// The broker sends basic.return before the ack of the same message, and the library
	// hands both over in that order: a return of this message is in the buffer by now.
	select {
	case r := <-returns:
		return fmt.Errorf("%w (%d %s)", broker.ErrUnroutable, r.ReplyCode, r.ReplyText)
	default:
		return nil
	}
}

// copyOf is the publishing that puts d back as it was. Two things are left out:
// x-delivery-count, which the quorum DLQ set and which counts its own deliveries (every
// List adds one; a quorum queue overwrites it on delivery, any other queue would hand the
// stale count to a consumer that backs off by it), and user-id, which the broker checks
// against the publishing connection's user. x-death stays: it records how often and why
// the message was dead-lettered before.
func copyOf(d amqp.Delivery) amqp.Publishing {
	var headers amqp.Table
	if len(d.Headers) > 0 {
		headers = amqp.Table{}
		for k, v := range d.Headers {
			if k != "x-delivery-count" {
				headers[k] = v
			}
		}
	}
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// describe reads a dead-lettered delivery's x-death entry for queue: the broker adds one
// per (queue, reason), most recent first, with a count and the time of the first.
func describe(d amqp.Delivery, queue string) Message {
	m := Message{ID: d.MessageId, Type: d.Type, RoutingKey: d.RoutingKey, Size: len(d.Body)}
	deaths, _ := d.Headers["x-death"].([]any)
	var entry amqp.Table
	for _, x := range deaths {
		t, ok := x.(amqp.Table)
		if !ok {
			continue
		}
		if entry == nil {
			entry = t // no entry for queue: the most recent one says the most
		}
		if t["queue"] == queue {
			entry = t
			break
		}
	}
	if entry == nil {
		return m // published to the DLQ by hand: no history
	}
	m.Reason, _ = entry["reason"].(string)
	m.FirstDeath, _ = entry["time"].(time.Time)
	switch n := entry["count"].(type) {
	case int64:
		m.Count = n
	case int32:
		m.Count = int64(n)
	}
	if keys, ok := entry["routing-keys"].([]any); ok && len(keys) > 0 {
		if k, ok := keys[0].(string); ok {
			m.RoutingKey = k
		}
	}
	return m
}

// label names a delivery in an error.
func label(d amqp.Delivery) string {
	if d.MessageId == "" {
		return fmt.Sprintf("message without id (delivery %d)", d.DeliveryTag)
	}
	return "message " + d.MessageId
}
