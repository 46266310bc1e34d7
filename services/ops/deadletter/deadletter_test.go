package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/ops/deadletter"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// The tests build a topology of their own in a fresh vhost, shaped like the contracts'
// (a work queue dead-lettering through a direct exchange into <queue>.dlq, a quorum
// queue), so the package is tested as the mechanism it is.

const (
	work     = "work"
	events   = "events"
	dlx      = "dlx"
	orderKey = "order.placed.v1"
)

type rabbit struct {
	url string
	ch  *amqp.Channel // the test's own channel, for setting up and looking
}

// newRabbit declares the test topology: events -> work -> (rejected) dlx -> work.dlq.
// work is a classic queue, so a header the broker would otherwise overwrite on delivery
// (x-delivery-count) shows whether Replay carried it over.
func newRabbit(t testing.TB) rabbit {
	t.Helper()
	url := testenv.VHost(t)
	conn, err := testenv.DialAMQP(t, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	must(t, ch.ExchangeDeclare(events, "topic", true, false, false, false, nil))
	must(t, ch.ExchangeDeclare(dlx, "direct", true, false, false, false, nil))
	declare(t, ch, deadletter.DLQ(work), broker.DLQArgs())
	must(t, ch.QueueBind(deadletter.DLQ(work), work, dlx, false, nil))
	declare(t, ch, work, amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": work})
	must(t, ch.QueueBind(work, orderKey, events, false, nil))
	must(t, ch.Confirm(false))
	return rabbit{url: url, ch: ch}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func declare(t testing.TB, ch *amqp.Channel, name string, args amqp.Table) {
	t.Helper()
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
}

// channel opens a channel of its own for the code under test, as its callers do.
func (r rabbit) channel(t testing.TB) *amqp.Channel {
	t.Helper()
	conn, err := testenv.DialAMQP(t, r.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publish sends a message and waits for the broker's confirm, again while the broker nacks
// it (a quorum queue declared a moment ago, on a loaded machine, has no leader yet).
func (r rabbit) publish(t *testing.T, exchange, key string, msg amqp.Publishing) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the broker to confirm a publish to "+exchange+"/"+key, func() bool {
		dc, err := r.ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, true, false, msg)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := dc.WaitContext(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
}

// deadLetter publishes messages with the given ids to work and rejects each one, as a
// consumer rejects poison: the broker moves them to work.dlq in this order.
func (r rabbit) deadLetter(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r.publish(t, events, orderKey, message(id))
		var d amqp.Delivery
		testenv.Eventually(t, 10*time.Second, "message "+id+" in "+work, func() bool {
			var ok bool
			var err error
			d, ok, err = r.ch.Get(work, false)
			must(t, err)
			return ok
		})
		must(t, d.Reject(false))
	}
	testenv.Eventually(t, 10*time.Second, "every message dead-lettered", func() bool {
		return r.depth(t, deadletter.DLQ(work)) >= len(ids)
	})
}

func message(id string) amqp.Publishing {
	return amqp.Publishing{
		MessageId:    id,
		Type:         orderKey,
		ContentType:  "application/cloudevents+json",
		AppId:        "ordering",
		DeliveryMode: amqp.Persistent,
		Timestamp:    time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Headers:      amqp.Table{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Body:         []byte(`{"id":"` + id + `"}`),
	}
}

func (r rabbit) depth(t *testing.T, queue string) int {
	t.Helper()
	return testenv.QueueDepth(t, r.url, queue)
}

// waitDepth waits until queue holds n messages. Messages a List or Replay did not take go
// back with a nack, which the broker does not answer: a look from another channel right
// after may not see them yet.
func (r rabbit) waitDepth(t *testing.T, queue string, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d messages in %s", n, queue), func() bool { return r.depth(t, queue) == n })
}

// take acks and returns every message now in queue, in order.
func (r rabbit) take(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := r.ch.Get(queue, true)
		must(t, err)
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func ids(ds []amqp.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.MessageId)
	}
	return out
}

func listIDs(t *testing.T, ch *amqp.Channel) []string {
	t.Helper()
	msgs, err := deadletter.List(context.Background(), ch, work)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

func TestListShowsWhyAndWhenEachMessageWasDeadLetteredAndLeavesItThere(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	before := time.Now().Add(-time.Minute) // the broker's clock, in whole seconds
	r.deadLetter(t, "m1", "m2", "m3")
	ch := r.channel(t)

	msgs, err := deadletter.List(context.Background(), ch, work)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(msgs); got != 3 {
		t.Fatalf("listed %d messages, want 3: %+v", got, msgs)
	}
	for i, m := range msgs {
		want := fmt.Sprintf("m%d", i+1)
		if m.ID != want || m.Type != orderKey || m.RoutingKey != orderKey || m.Reason != "rejected" || m.Count != 1 ||
			m.Size != len(message(want).Body) || m.FirstDeath.Before(before) || m.FirstDeath.After(time.Now().Add(time.Minute)) {
			t.Errorf("message %d = %+v, want id %s, type and routing key %s, rejected once within the last minute, %d bytes",
				i, m, want, orderKey, len(message(want).Body))
		}
	}
	// Looking twice sees the same, in the same order: nothing was taken.
	if got := listIDs(t, ch); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Errorf("second list = %v, want [m1 m2 m3]", got)
	}
	r.waitDepth(t, deadletter.DLQ(work), 3)
}

// An operator may look at a dead letter any number of times before replaying it. Each
// List returns it to the DLQ, and RabbitMQ counts every return as a delivery (3.10 and
// 4.0 alike). RabbitMQ 4 gives a quorum queue without a delivery limit of its own one of
// 20, and a DLQ has nowhere to dead-letter to: the 21st look would drop the message. The
// DLQ's own limit (broker.DLQArgs) keeps it there on both versions.
func TestADeadLetterOutlastsMoreLooksThanRabbitMQ4sDefaultDeliveryLimit(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	version := testenv.RabbitMQ(t)
	r.deadLetter(t, "m1")
	ch := r.channel(t)
	const looks = 25
	for i := range looks {
		// The last look's return is not answered: wait until the broker has it back, asking
		// on the test's own channel rather than a connection per poll.
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the dead letter back in the DLQ before look %d of %d on RabbitMQ %s", i+1, looks, version), func() bool {
			q, err := r.ch.QueueDeclarePassive(deadletter.DLQ(work), true, false, false, false, nil)
			must(t, err)
			return q.Messages == 1
		})
		if got := listIDs(t, ch); !slices.Equal(got, []string{"m1"}) {
			t.Fatalf("look %d of %d on RabbitMQ %s listed %v, want [m1]: the DLQ dropped its dead letter", i+1, looks, version, got)
		}
	}
	r.waitDepth(t, deadletter.DLQ(work), 1)
	if n, err := deadletter.Replay(context.Background(), r.channel(t), work); err != nil || n != 1 {
		t.Fatalf("replay after %d looks moved %d, %v; want 1", looks, n, err)
	}
}

func TestReplayMovesEveryMessageBackAsItWasAndEmptiesTheDLQ(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.deadLetter(t, "m1", "m2", "m3")
	ch := r.channel(t)
	listIDs(t, ch) // a look first: the quorum DLQ counts it as a delivery of each message

	n, err := deadletter.Replay(context.Background(), ch, work)
	if err != nil || n != 3 {
		t.Fatalf("Replay = %d, %v; want 3, nil", n, err)
	}
	if d := r.depth(t, deadletter.DLQ(work)); d != 0 {
		t.Errorf("DLQ depth after replay = %d, want 0", d)
	}
	got := r.take(t, work)
	if !slices.Equal(ids(got), []string{"m1", "m2", "m3"}) {
		t.Fatalf("work queue holds %v, want [m1 m2 m3] in order", ids(got))
	}
	for _, d := range got {
		want := message(d.MessageId)
		if string(d.Body) != string(want.Body) || d.Type != want.Type || d.ContentType != want.ContentType ||
			d.AppId != want.AppId || d.DeliveryMode != amqp.Persistent || !d.Timestamp.Equal(want.Timestamp) ||
			d.Headers["traceparent"] != want.Headers["traceparent"] {
			t.Errorf("replayed %s = %+v, want body, type, content type, app id, persistence, timestamp and traceparent kept", d.MessageId, d)
		}
		if _, ok := d.Headers["x-death"]; !ok {
			t.Errorf("replayed %s lost its x-death history", d.MessageId)
		}
		if c, ok := d.Headers["x-delivery-count"]; ok {
			t.Errorf("replayed %s carries the DLQ's x-delivery-count %v to the consumer", d.MessageId, c)
		}
		if d.RoutingKey != work || d.Exchange != "" {
			t.Errorf("replayed %s came through exchange %q key %q, want the default exchange and key %s: to this queue alone",
				d.MessageId, d.Exchange, d.RoutingKey, work)
		}
	}
}

func TestReplayWithIDsMovesOnlyThoseAndLeavesTheRestInTheirOrder(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.deadLetter(t, "m1", "m2", "m3", "m4", "m5")
	ch := r.channel(t)

	n, err := deadletter.Replay(context.Background(), ch, work, "m4", "m2")
	if err != nil || n != 2 {
		t.Fatalf("Replay(m4, m2) = %d, %v; want 2, nil", n, err)
	}
	if got := ids(r.take(t, work)); !slices.Equal(got, []string{"m2", "m4"}) {
		t.Errorf("work queue holds %v, want [m2 m4]", got)
	}
	r.waitDepth(t, deadletter.DLQ(work), 3)
	if got := listIDs(t, r.channel(t)); !slices.Equal(got, []string{"m1", "m3", "m5"}) {
		t.Errorf("DLQ holds %v, want [m1 m3 m5]", got)
	}
}

func TestReplayOfAnIDNotInTheDLQMovesNothing(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.deadLetter(t, "m1", "m2")

	n, err := deadletter.Replay(context.Background(), r.channel(t), work, "m1", "nope")
	if !errors.Is(err, deadletter.ErrNotFound) || n != 0 {
		t.Fatalf("Replay(m1, nope) = %d, %v; want 0, ErrNotFound", n, err)
	}
	if d := r.depth(t, work); d != 0 {
		t.Errorf("work queue holds %d messages, want 0", d)
	}
	r.waitDepth(t, deadletter.DLQ(work), 2)
	if got := listIDs(t, r.channel(t)); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("DLQ holds %v, want [m1 m2]", got)
	}
}

// The queue refuses the copy (full, with overflow reject-publish: the broker nacks the
// publish). The original must still be in the DLQ: it is acked only after a confirm.
func TestReplayKeepsTheDeadLetterWhenTheQueueRefusesTheCopy(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	const full = "full"
	declare(t, r.ch, deadletter.DLQ(full), amqp.Table{"x-queue-type": "quorum"})
	declare(t, r.ch, full, amqp.Table{"x-max-length": 1, "x-overflow": "reject-publish"})
	r.publish(t, "", full, message("occupant"))
	for _, id := range []string{"m1", "m2"} {
		r.publish(t, "", deadletter.DLQ(full), message(id))
	}

	n, err := deadletter.Replay(context.Background(), r.channel(t), full)
	if !errors.Is(err, broker.ErrNacked) || n != 0 {
		t.Fatalf("Replay into a full queue = %d, %v; want 0, ErrNacked", n, err)
	}
	r.waitDepth(t, deadletter.DLQ(full), 2)
	msgs, err := deadletter.List(context.Background(), r.channel(t), full)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.ID)
	}
	if !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("DLQ holds %v after the refused replay, want [m1 m2]: a message was lost", got)
	}
	if d := r.depth(t, full); d != 1 {
		t.Errorf("full queue holds %d, want its 1 occupant", d)
	}
}

func TestReplayToAQueueThatDoesNotExistFailsAndTakesNothing(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	declare(t, r.ch, deadletter.DLQ("gone"), amqp.Table{"x-queue-type": "quorum"})
	r.publish(t, "", deadletter.DLQ("gone"), message("m1"))

	n, err := deadletter.Replay(context.Background(), r.channel(t), "gone")
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound || n != 0 {
		t.Fatalf("Replay to a missing queue = %d, %v; want 0 and the broker's 404 for the queue", n, err)
	}
	r.waitDepth(t, deadletter.DLQ("gone"), 1)
}
