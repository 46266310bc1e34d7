package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// MaxBatch is the most messages PublishBatch takes at once. The channel's return buffer
// holds this many, so the connection's reader never blocks on a return we have not read.
const MaxBatch = 512

// ErrUnroutable is reported for a mandatory message no queue was bound to take.
var ErrUnroutable = errors.New("broker returned the message: no queue is bound for its routing key")

// ErrNacked is reported for a message the broker refused to take responsibility for.
var ErrNacked = errors.New("broker nacked the message")

// Message is one message to publish to the topology's exchange.
type Message struct {
	RoutingKey string
	Publishing amqp.Publishing // MessageId must be set: returns are matched on it
}

// Publisher publishes with publisher confirms on one channel, reopened after any error.
// It is safe for concurrent use; batches are published one at a time.
type Publisher struct {
	conn           *Conn
	topology       Topology
	confirmTimeout time.Duration

	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
}

// NewPublisher returns a Publisher to t's exchange that waits at most confirmTimeout for
// a batch's acks. It declares t on every channel it opens: a service's publisher declares
// the exchanges alone (Topology.Subset), and the queues are their consumers' to declare.
// Give it a Conn of its own: see Conn.
func NewPublisher(conn *Conn, t Topology, confirmTimeout time.Duration) *Publisher {
	return &Publisher{conn: conn, topology: t, confirmTimeout: confirmTimeout}
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

// PublishBatch publishes msgs pipelined: every message is sent before the first ack is
// awaited, so a batch costs about one round trip, not one per message. It returns one
// error per message:
//
//   - nil: the broker confirmed the message and routed it to a queue;
//   - ErrNacked or ErrUnroutable: the broker refused this message on a healthy channel, a
//     failure that belongs to the message;
//   - ErrUnavailable: the channel, the connection or the broker failed (closed, blocked,
//     no confirm in time), a failure that belongs to no message.
//
// Whatever the error, the message may or may not be in the broker, and the caller must
// publish it again later: at least once, never zero.
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

	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		m.Publishing.DeliveryMode = amqp.Persistent
		confirms[i], errs[i] = ch.PublishWithDeferredConfirmWithContext(ctx, p.topology.Exchange, m.RoutingKey, true, false, m.Publishing)
		if errs[i] != nil {
			errs[i] = fmt.Errorf("%w: publish: %w", ErrUnavailable, errs[i])
		}
	}
	broken := false
	for i, dc := range confirms {
		if errs[i] != nil || dc == nil {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("%w: publish: channel not in confirm mode", ErrUnavailable)
			}
			broken = true
			continue
		}
		acked, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("%w: publish: waiting for confirm: %w", ErrUnavailable, err)
			broken = true
		case !acked && ch.IsClosed():
			// The library resolves every outstanding confirm as a nack when the channel
			// closes; that is the channel's failure, not a refusal of this message.
			errs[i] = fmt.Errorf("%w: publish: channel closed before the confirm", ErrUnavailable)
			broken = true
		case !acked:
			errs[i] = ErrNacked
		}
	}
	// The broker sends basic.return before the basic.ack of the same message, and the
	// library hands both over in that order, so every return of this batch is already in
	// the buffer once its acks are in.
drain:
	for {
		select {
		case r := <-p.returns:
			for i, m := range msgs {
				if m.Publishing.MessageId == r.MessageId && errs[i] == nil {
					errs[i] = fmt.Errorf("%w (%d %s)", ErrUnroutable, r.ReplyCode, r.ReplyText)
				}
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
	// redeclared by its consumer when it reconnects; until then its events come back
	// unroutable, and the caller publishes them again later.
	if err := p.topology.Declare(ch); err != nil {
		closeAsync(ch)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := ch.Confirm(false); err != nil {
		closeAsync(ch)
		return nil, fmt.Errorf("%w: publish: confirm mode: %w", ErrUnavailable, err)
	}
	p.returns = ch.NotifyReturn(make(chan amqp.Return, MaxBatch))
	p.ch = ch
	return ch, nil
}

func (p *Publisher) reset() {
	if p.ch != nil {
		closeAsync(p.ch)
	}
	p.ch = nil
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
