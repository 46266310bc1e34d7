package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// SetUpDialDeadline is how long DialAMQP keeps trying a broker that answers slowly.
const SetUpDialDeadline = 30 * time.Second

// DialAMQP opens a test's own connection to the broker at amqpURL, for its set-up and its
// checks, never for the code under test, whose dials keep their own bound.
//
// broker.Dial gives the TCP connect and the AMQP handshake five seconds each (a product
// must notice a stalled broker), and on a machine busy with the whole suite a handshake
// can take longer. A test that gave up then would fail for the machine's load, not for
// the code it tests, so DialAMQP dials again while the broker accepts connections but is
// slow to answer, until SetUpDialDeadline. A broker that refuses the connection, or a
// login it refuses, fails at once: that is not slowness.
func DialAMQP(t testing.TB, amqpURL string) (*amqp.Connection, error) {
	t.Helper()
	deadline := time.Now().Add(SetUpDialDeadline)
	for {
		conn, err := broker.Dial(context.Background(), amqpURL, amqp.Config{})
		if err == nil {
			return conn, nil
		}
		if !slowBroker(err) || time.Now().After(deadline) {
			return nil, err
		}
		t.Logf("dial RabbitMQ: %v; dialling again", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// slowBroker says whether a failed dial is one a busy broker gives: a time-out of the
// connect or of the handshake (which amqp091 reports as a frame error, 501, with the
// cause only in its text), or the connection closed or reset mid-handshake.
func slowBroker(err error) bool {
	var amqpErr *amqp.Error
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return false
	case errors.As(err, &amqpErr):
		return amqpErr.Code == amqp.FrameError
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}
