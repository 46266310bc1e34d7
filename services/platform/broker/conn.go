// Package broker connects to RabbitMQ, declares the topology of the contracts and
// publishes with confirms.
//
// It closes two failures. A broker that restarts or a link that drops must not need a
// service restart: Conn redials on demand, so every caller that asks for a channel after
// an outage gets a working one. And a publish is not done when Publish returns, only when
// the broker confirms it: Publisher waits for the ack and treats a nack, a return
// (unroutable) or a timeout as not published.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Conn is a RabbitMQ connection that redials when it finds itself closed.
type Conn struct {
	url  string
	name string

	mu   sync.Mutex
	conn *amqp.Connection
}

// NewConn returns a Conn for url; it dials on first use. name shows in the management UI.
func NewConn(url, name string) *Conn { return &Conn{url: url, name: name} }

// Channel returns a new channel, dialling first if the connection is missing or closed.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	conn, err := c.connection(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("broker channel: %w", err)
	}
	return ch, nil
}

func (c *Conn) connection(ctx context.Context) (*amqp.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	cfg := amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": c.name},
		Dial:       dialer(ctx),
	}
	conn, err := amqp.DialConfig(c.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("broker dial: %w", err)
	}
	c.conn = conn
	return conn, nil
}

// dialer bounds the TCP and AMQP handshake by ctx and 5 seconds, so a black-holed broker
// (a network partition, not a refused port) cannot hang the caller.
func dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		d := net.Dialer{KeepAlive: 15 * time.Second}
		return d.DialContext(dctx, network, addr)
	}
}

// Ping reports whether the broker is reachable, dialling if needed. Used by /readyz.
func (c *Conn) Ping(ctx context.Context) error {
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
