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

// Message is one message to publish to the events exchange.
type Message struct {
	RoutingKey string
	Publishing amqp.Publishing // MessageId must be set: returns are matched on it
}

// Publisher publishes with publisher confirms on one channel, reopened after any error.
// It is safe for concurrent use; batches are published one at a time.
type Publisher struct {
	conn           *Conn
	confirmTimeout time.Duration

	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
}

// NewPublisher returns a Publisher that waits at most confirmTimeout for a batch's acks.
func NewPublisher(conn *Conn, confirmTimeout time.Duration) *Publisher {
	return &Publisher{conn: conn, confirmTimeout: confirmTimeout}
}

// PublishBatch publishes msgs pipelined: every message is sent before the first ack is
// awaited, so a batch costs about one round trip, not one per message. It returns one
// error per message; nil means the broker confirmed it and it was routed to a queue.
// Anything else (nack, return, timeout, lost channel) means it may or may not be in the
// broker, and the caller must publish it again later: at least once, never zero.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) > MaxBatch {
		for i := range errs {
			errs[i] = fmt.Errorf("publish: batch of %d exceeds %d", len(msgs), MaxBatch)
		}
		return errs
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	ch, err := p.channel(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, p.confirmTimeout)
	defer cancel()

	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		m.Publishing.DeliveryMode = amqp.Persistent
		confirms[i], errs[i] = ch.PublishWithDeferredConfirmWithContext(ctx, Exchange, m.RoutingKey, true, false, m.Publishing)
	}
	broken := false
	for i, dc := range confirms {
		if errs[i] != nil || dc == nil {
			if errs[i] == nil {
				errs[i] = errors.New("publish: channel not in confirm mode")
			}
			broken = true
			continue
		}
		acked, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("publish: waiting for confirm: %w", err)
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
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	ch, err := p.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	// Declared on every new channel: after a broker restart that lost the topology, the
	// first publish would otherwise be returned as unroutable until someone redeclared.
	if err := DeclareTopology(ch); err != nil {
		_ = ch.Close()
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("publish: confirm mode: %w", err)
	}
	p.returns = ch.NotifyReturn(make(chan amqp.Return, MaxBatch))
	p.ch = ch
	return ch, nil
}

func (p *Publisher) reset() {
	if p.ch != nil {
		_ = p.ch.Close()
	}
	p.ch = nil
}

// Close closes the publishing channel.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset()
}
