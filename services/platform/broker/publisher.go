package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// MaxBatch is the most messages PublishBatch takes at once. The channel's return buffer
// holds this many copies of each, so the connection's reader never blocks on a return we
// have not read.
const MaxBatch = 512

// ErrUnroutable is reported for a mandatory message no queue was bound to take.
var ErrUnroutable = errors.New("broker returned the message: no queue is bound for its routing key")

// ErrNacked is reported for a message the broker nacked: it could not take
// responsibility for it. It wraps ErrUnavailable. RabbitMQ nacks only for reasons of its
// own, never for a fault of the message: an internal error in the queue's process (in a
// cluster, a quorum queue whose leader is moving, for as long as minutes after a node
// dies), or a queue over its max-length with overflow reject-publish, which an operator
// sets. The same message is taken once that passes, so a nack spends no message's retry
// budget: a relay that parked nacked events as dead would turn a full queue or a node's
// loss into stranded data (TestANackedPublishSpendsNoAttempt).
var ErrNacked = fmt.Errorf("%w: broker nacked the message (an internal error of the queue, or a queue over its length limit)", ErrUnavailable)

// ErrMissingQueue is reported for a message held back because a queue bound to its type
// does not exist, or was missing or unbound when the broker routed the message's copy
// to it. It wraps ErrUnavailable: the topology is incomplete, which is no fault of the
// message, and the message is published once the queue is there.
var ErrMissingQueue = fmt.Errorf("%w: a queue bound to the event's type does not exist", ErrUnavailable)

// ErrMissingExchange is reported for a batch held back because the exchange it is
// published to does not exist: deleted under a running publisher, or lost with a broker
// that restarted without its definitions. It wraps ErrUnavailable. The publisher declares
// its exchanges on every channel it opens, so it drops its channels on this error, and
// the next batch declares the exchange again and is published.
var ErrMissingExchange = fmt.Errorf("%w: the exchange does not exist", ErrUnavailable)

// Message is one message to publish to the topology's exchange.
type Message struct {
	RoutingKey string
	Publishing amqp.Publishing // MessageId must be set: returns are matched on it
}

// Publisher publishes with publisher confirms on one channel, reopened after any error.
// It is safe for concurrent use; batches are published one at a time.
//
// It publishes an event once per queue its topology binds to the event's type, each copy
// under a routing key only that queue is bound to (QueueKey), with mandatory set. The
// broker cannot say which of several queues one message reached: a message routed to
// one of its two queues is acked, and only one that reaches no queue at all comes back.
// An event taken as published while one of its queues was missing (a first deployment,
// a consumer that starts late, a queue deleted and not yet declared again) or unbound (a
// consumer killed between declaring its queue and binding it, or a queue deleted and
// declared again so between the publisher's look and its publish) would never reach that
// queue's consumer. A copy comes back exactly when its one queue is missing or unbound,
// and the event is then published again (ErrMissingQueue); the queues that took a copy
// have it twice, and their consumers' inboxes drop the second. The publisher binds each
// queue to its key itself, the first time it publishes there on a channel and after a
// copy came back: queue.bind is idempotent, and fails with NOT_FOUND on a queue that
// does not exist. It declares no queue: a queue's arguments are its consumer's and its
// deployment's to set. An event whose type its topology binds to no queue goes out once,
// under its type, and a return is its own failure (ErrUnroutable).
type Publisher struct {
	conn           *Conn
	topology       Topology
	queues         map[string][]string // event type: the queues bound to it, each to get a copy
	returnBuffer   int                 // the most copies of one batch that can come back
	confirmTimeout time.Duration

	mu          sync.Mutex
	ch          *amqp.Channel
	returns     chan amqp.Return
	closed      chan *amqp.Error // why the broker closed ch
	closeReason *amqp.Error      // read from closed
	check       *amqp.Channel    // for binds, which close it when the queue is missing
	bound       map[binding]bool // made since ch was opened, and no copy sent under it came back

	beforePublish func() // tests only: see export_test.go
}

// NewPublisher returns a Publisher to the exchange of t, the system's whole topology,
// that waits at most confirmTimeout for a batch's acks. It declares t's exchanges on
// every channel it opens and no queue: a queue is its deployment's and its consumer's to
// declare. It binds the queues its events are bound to, each to its copy's key, which
// needs write on each of them and read on the exchange (docs/security.md). Give it a
// Conn of its own: see Conn.
func NewPublisher(conn *Conn, t Topology, confirmTimeout time.Duration) *Publisher {
	queues := map[string][]string{}
	for _, q := range t.Queues {
		for _, typ := range q.Bindings {
			queues[typ] = append(queues[typ], q.Name)
		}
	}
	most := 1
	for _, qs := range queues {
		most = max(most, len(qs))
	}
	return &Publisher{conn: conn, topology: t, queues: queues, returnBuffer: MaxBatch * most, confirmTimeout: confirmTimeout}
}

// QueueKey is the routing key of an event of type eventType's copy to queue: the type,
// so that the broker's topic permissions and the consumer's check read the producer from
// it, then "@" and the queue, which only that queue is bound to.
func QueueKey(eventType, queue string) string { return eventType + "@" + queue }

// binding is one queue's binding to a routing key on the publisher's exchange.
type binding struct{ queue, key string }

// outgoing is one message as it goes out: a copy of msgs[msg] to queue under key, or
// the message itself under its type (queue empty).
type outgoing struct {
	msg        int
	queue, key string
	confirm    *amqp.DeferredConfirmation
}

// outgoing lists the copies of msgs to publish: one per queue bound to the message's
// type, or the message itself when none is.
func (p *Publisher) outgoing(msgs []Message) []outgoing {
	var out []outgoing
	for i, m := range msgs {
		queues := p.queues[m.RoutingKey]
		if len(queues) == 0 {
			out = append(out, outgoing{msg: i, key: m.RoutingKey})
		}
		for _, q := range queues {
			out = append(out, outgoing{msg: i, queue: q, key: QueueKey(m.RoutingKey, q)})
		}
	}
	return out
}

// Exchange is the exchange the publisher publishes to.
func (p *Publisher) Exchange() string { return p.topology.Exchange }

// MaxDuration is the longest one PublishBatch can take: a dial, then the confirm timeout.
// A claim on the messages being published must outlast it.
func (p *Publisher) MaxDuration() time.Duration { return DialTimeout + p.confirmTimeout }

// Ready opens the publishing channel if there is none and reports whether the broker can
// take messages now. A caller with messages waiting asks before taking them on, so an
// outage leaves them untouched instead of failing each one. Its errors wrap
// ErrUnavailable.
func (p *Publisher) Ready(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.channel(ctx)
	return err
}

// PublishBatch publishes msgs pipelined (one round trip a batch) and returns one error per
// message: nil (every copy confirmed and routed to its queue); ErrUnroutable (the
// message's own failure: no queue is bound for its type); ErrUnavailable (the channel,
// connection or broker failed: no message's); ErrNacked, an ErrUnavailable too: the
// broker refused a copy for a reason of its own; ErrMissingQueue, an ErrUnavailable too:
// a queue bound to its type does not exist, or its copy came back; or
// ErrMissingExchange, an ErrUnavailable too: the exchange is gone, and the next batch
// declares it again. Whatever the error, the message may or may not be in some of its
// queues: the caller publishes it again later.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message) []error {
	errs := make([]error, len(msgs))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if len(msgs) > MaxBatch {
		return fail(fmt.Errorf("publish: batch of %d exceeds %d", len(msgs), MaxBatch))
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	ch, err := p.channel(ctx)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.confirmTimeout)
	defer cancel()

	out := p.outgoing(msgs)
	broken := false
	if err := p.bindQueues(ctx, msgs, out, errs); err != nil {
		return fail(err)
	}
	if p.beforePublish != nil {
		p.beforePublish()
	}
	for i := range out {
		o := &out[i]
		if errs[o.msg] != nil {
			continue // a queue of its type is missing: none of its copies goes out
		}
		m := msgs[o.msg]
		m.Publishing.DeliveryMode = amqp.Persistent
		// Who published it, which the broker checks against the login: a consumer takes
		// an event only from its producer (consumer.Config.Producer).
		m.Publishing.UserId = p.conn.Login()
		o.confirm, err = ch.PublishWithDeferredConfirmWithContext(ctx, p.topology.Exchange, o.key, true, false, m.Publishing)
		if err != nil {
			errs[o.msg] = fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
			broken = true
		}
	}
	for _, o := range out {
		if o.confirm == nil {
			if errs[o.msg] == nil {
				errs[o.msg] = fmt.Errorf("%w: publish: channel not in confirm mode", ErrUnavailable)
				broken = true
			}
			continue
		}
		acked, err := o.confirm.WaitContext(ctx)
		switch {
		case err != nil:
			errs[o.msg] = cmp.Or(errs[o.msg], fmt.Errorf("%w: publish: waiting for confirm: %w", ErrUnavailable, err))
			broken = true
		case !acked && ch.IsClosed():
			// The library resolves every outstanding confirm as a nack when the channel
			// closes; that is the channel's failure, not a refusal of this message.
			errs[o.msg] = cmp.Or(errs[o.msg], p.closedError())
			broken = true
		case !acked:
			errs[o.msg] = cmp.Or(errs[o.msg], ErrNacked)
			// A channel can go on nacking for good: one opened on a cluster node while
			// a quorum queue's leader was dying keeps sending to the dead leader
			// (RabbitMQ 3.10), and every retry of the message on it was nacked again
			// (TestOrdersPlacedAcrossABrokerNodeLossAndAPostgresFailoverAreEachEmailedOnce).
			// A fresh channel finds the new leader.
			broken = true
		}
	}
	// The broker sends basic.return before the basic.ack of the same message, and the
	// library hands both over in that order, so every return of this batch is already in
	// the buffer once its acks are in. A closed channel closes the buffer too: read on, and
	// a closed buffer would answer at once, forever, with the publisher's lock held.
drain:
	for {
		select {
		case r, ok := <-p.returns:
			if !ok {
				break drain
			}
			for _, o := range out {
				if msgs[o.msg].Publishing.MessageId != r.MessageId || o.key != r.RoutingKey || errs[o.msg] != nil {
					continue
				}
				if o.queue == "" {
					errs[o.msg] = fmt.Errorf("%w (%d %s)", ErrUnroutable, r.ReplyCode, r.ReplyText)
					continue
				}
				// Deleted, or declared again without the binding, since the publisher
				// bound it: bound again before the next copy goes there.
				delete(p.bound, binding{o.queue, o.key})
				errs[o.msg] = fmt.Errorf("%w: queue %s, bound to %s, missing or unbound when its copy was routed", ErrMissingQueue, o.queue, msgs[o.msg].RoutingKey)
			}
		default:
			break drain
		}
	}
	if broken {
		// A timed-out or failed channel may still deliver late acks; a fresh one keeps
		// them from being read as acks of the next batch.
		p.reset()
	}
	return errs
}

// bindQueues binds each queue of out to its copy's key unless it was bound on this
// channel already, and sets an ErrMissingQueue in errs for each message of msgs one of
// whose queues does not exist. Its own error is a failure of the channel or the broker.
func (p *Publisher) bindQueues(ctx context.Context, msgs []Message, out []outgoing, errs []error) error {
	for _, o := range out {
		b := binding{o.queue, o.key}
		if o.queue == "" || p.bound[b] || errs[o.msg] != nil {
			continue
		}
		ok, err := p.bindQueue(ctx, o.queue, o.key)
		if err != nil {
			return err
		}
		if !ok {
			errs[o.msg] = fmt.Errorf("%w: queue %s, bound to %s", ErrMissingQueue, o.queue, msgs[o.msg].RoutingKey)
			continue
		}
		p.bound[b] = true
	}
	return nil
}

// closedError is a batch's error once the broker has closed the publishing channel:
// ErrMissingExchange when it closed it for a publish to an exchange that does not exist
// (deleted under the publisher), ErrUnavailable otherwise. The library sends the close's
// reason before it resolves the channel's confirms.
func (p *Publisher) closedError() error {
	if p.closeReason == nil {
		select {
		case e := <-p.closed:
			p.closeReason = e
		default:
		}
	}
	switch e := p.closeReason; {
	case e == nil:
		return fmt.Errorf("%w: publish: channel closed before the confirm", ErrUnavailable)
	case e.Code == amqp.NotFound && strings.Contains(e.Reason, "no exchange"):
		return fmt.Errorf("%w: exchange %s (%s)", ErrMissingExchange, p.topology.Exchange, e.Reason)
	default:
		return fmt.Errorf("%w: publish: channel closed before the confirm: %s", ErrUnavailable, e.Reason)
	}
}

// bindQueue binds queue to key on the exchange, so that the next message published with
// key reaches it, and reports false if queue does not exist.
func (p *Publisher) bindQueue(ctx context.Context, queue, key string) (bool, error) {
	return p.onCheckChannel(ctx, "bind queue "+queue+" to "+key, func(ch *amqp.Channel) error {
		return ch.QueueBind(queue, key, p.topology.Exchange, false, nil)
	})
}

// onCheckChannel runs op on the check channel, bounded by ctx (a stalled link must not
// hold the publisher past its confirm timeout), and reports false if the broker answered
// NOT_FOUND for the queue op names. A NOT_FOUND for the exchange is an ErrMissingExchange,
// and drops the publishing channel too, so the next one declares the exchange again: a
// bind names a queue and an exchange, and only the reply's text tells which is missing.
func (p *Publisher) onCheckChannel(ctx context.Context, what string, op func(*amqp.Channel) error) (bool, error) {
	if p.check == nil || p.check.IsClosed() {
		ch, err := p.conn.Channel(ctx)
		if err != nil {
			return false, err
		}
		p.check = ch
	}
	ch := p.check
	done := make(chan error, 1)
	go func() { done <- op(ch) }()
	select {
	case err := <-done:
		var amqpErr *amqp.Error
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound && strings.Contains(amqpErr.Reason, "no exchange"):
			p.reset()
			return false, fmt.Errorf("%w: exchange %s (%s)", ErrMissingExchange, p.topology.Exchange, amqpErr.Reason)
		case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound:
			p.check = nil // the broker closed the channel with its answer
			return false, nil
		default:
			p.check = nil
			return false, fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
		}
	case <-ctx.Done():
		closeAsync(ch)
		p.check = nil
		return false, fmt.Errorf("%w: %s: %w", ErrUnavailable, what, ctx.Err())
	}
}

func (p *Publisher) channel(ctx context.Context) (*amqp.Channel, error) {
	if reason := p.conn.Blocked(); reason != "" {
		// A blocked connection takes publishes into its socket buffer and then stalls;
		// failing fast keeps the caller's claims short and its loop responsive.
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, reason)
	}
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	ch, err := p.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	// Declared on every new channel: after a broker restart that lost the topology, the
	// first publish would otherwise fail on a missing exchange. A queue missing too is
	// redeclared by its consumer when it reconnects; until then its events wait
	// (ErrMissingQueue), and the caller publishes them later.
	if err := p.topology.Subset().Declare(ch, nil); err != nil {
		closeAsync(ch)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := ch.Confirm(false); err != nil {
		closeAsync(ch)
		return nil, fmt.Errorf("%w: publish: confirm mode: %w", ErrUnavailable, err)
	}
	p.returns = ch.NotifyReturn(make(chan amqp.Return, p.returnBuffer))
	p.closed, p.closeReason = ch.NotifyClose(make(chan *amqp.Error, 1)), nil
	p.bound = map[binding]bool{}
	p.ch = ch
	return ch, nil
}

func (p *Publisher) reset() {
	for _, ch := range []*amqp.Channel{p.ch, p.check} {
		if ch != nil {
			closeAsync(ch)
		}
	}
	p.ch, p.check = nil, nil
}

// closeAsync closes ch without waiting. Channel.Close waits for the broker's close-ok,
// which never comes while the connection is blocked or stalled; waiting would hold the
// publisher's lock, and every later publish with it, until the heartbeat gave up.
func closeAsync(ch *amqp.Channel) { go func() { _ = ch.Close() }() }

// Close closes the publishing channel.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset()
}
