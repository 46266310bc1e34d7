// Package broker connects to RabbitMQ, declares a system's topology and publishes with
// confirms.
//
// It closes three failures: Conn redials on demand, so a restarted broker or a dropped
// link needs no service restart; a publish is done only when the broker confirms it
// (Publisher treats a nack, a return or a timeout as not published); and every failure
// of the connection itself, and every nack (the broker's refusal for a reason of its
// own), wraps ErrUnavailable, so callers tell an outage from a return (one message's)
// and spend no message's retry budget on it.
package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrUnavailable marks a failure of the broker or the link to it rather than of any one
// message: the caller should back off and try the same work again later, without
// counting it against the message.
var ErrUnavailable = errors.New("broker unavailable")

// Unavailable reports whether err is a failure of the broker rather than of a message.
func Unavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// DialTimeout bounds the TCP and AMQP handshake of one dial of one host.
const DialTimeout = 5 * time.Second

// Conn is a RabbitMQ connection that redials when it finds itself closed.
//
// A service opens one Conn for publishing and another for consuming. RabbitMQ blocks a
// publishing connection when it runs out of memory or disk (connection.blocked) and then
// stops reading from it; a consumer sharing that connection could no longer ack, and the
// messages it holds would wait with it. On their own connections the consumer keeps
// draining while the publisher fails fast.
//
// The URL may name several nodes of a cluster (Endpoints): every dial, the first and each
// redial after the connection closed, tries them in turn, so a Conn follows the cluster
// when the node it was connected to goes down.
type Conn struct {
	endpoints Endpoints
	badURL    error // from ParseEndpoints; every Channel returns it
	name      string

	mu      sync.Mutex
	conn    *amqp.Connection
	blocked *blockState // of conn; replaced with it
}

type blockState struct {
	mu     sync.Mutex
	reason string // empty: not blocked
}

func (b *blockState) set(n amqp.Blocking) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reason = ""
	if n.Active {
		b.reason = "connection blocked by the broker: " + n.Reason
	}
}

// NewConn returns a Conn for url, one host or several (ParseEndpoints); it dials on
// first use. name shows in the management UI. A url ParseEndpoints refuses makes every
// Channel fail with its error, which is not ErrUnavailable: no wait mends it. A service
// checks AMQP_URL at start (package service), so it never gets that far.
func NewConn(url, name string) *Conn {
	e, err := ParseEndpoints(url)
	if err != nil {
		err = fmt.Errorf("broker URL: %w", err)
	}
	return &Conn{endpoints: e, badURL: err, name: name}
}

// Login is the user the connection logs in as (Endpoints.Login).
func (c *Conn) Login() string { return c.endpoints.Login() }

// Channel returns a new channel, dialling first if the connection is missing or closed.
// Its errors wrap ErrUnavailable.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	conn, err := c.connection(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: open channel: %w", ErrUnavailable, err)
	}
	return ch, nil
}

// Blocked returns the broker's reason when it has blocked this connection (a memory or
// disk alarm), and "" otherwise: also once the blocked connection has closed, so that
// the next caller redials.
func (c *Conn) Blocked() string {
	c.mu.Lock()
	b, closed := c.blocked, c.conn == nil || c.conn.IsClosed()
	c.mu.Unlock()
	if b == nil || closed {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reason
}

func (c *Conn) connection(ctx context.Context) (*amqp.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	if c.badURL != nil {
		return nil, c.badURL
	}
	cfg := amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": c.name},
		Dial:       dialer(ctx),
	}
	conn, err := c.endpoints.Dial(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %w", ErrUnavailable, c.endpoints.Redacted(), err)
	}
	b := &blockState{}
	notes := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		for n := range notes {
			b.set(n)
		}
		// The library closes notes when the connection closes, and a closed connection
		// is never unblocked: its alarm goes with it, or the next caller would refuse to
		// redial.
		b.set(amqp.Blocking{})
	}()
	c.conn, c.blocked = conn, b
	return conn, nil
}

// Ping reports whether the broker is reachable and has not blocked this connection,
// dialling if needed. Used by /readyz.
func (c *Conn) Ping(ctx context.Context) error {
	if reason := c.Blocked(); reason != "" {
		return fmt.Errorf("%w: %s", ErrUnavailable, reason)
	}
	ch, err := c.Channel(ctx)
	if err != nil {
		return err
	}
	return ch.Close()
}

// Close closes the connection, if any.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.conn.IsClosed() {
		return nil
	}
	err := c.conn.Close()
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
