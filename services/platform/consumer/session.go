package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
)

// errOutage marks a session that ended because a dependency of the handler failed.
var errOutage = errors.New("a dependency of the handler is down")

// healthyPeriod is how long a session must have lasted for its end to start a new count
// of reconnect backoff: a hiccup after an hour of work waits the shortest delay again.
const healthyPeriod = 30 * time.Second

// Run consumes until ctx ends, reconnecting after the broker or the connection goes away
// and pausing while a dependency of the handler is down. On return every delivery it
// started has been acked, rejected or requeued, and every delivery it had not started is
// back in the queue.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.setState("stopped")
	failures := 0
	for ctx.Err() == nil {
		started := time.Now()
		err := c.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > healthyPeriod {
			failures = 0
		}
		c.setState(err.Error())
		c.log.WarnContext(ctx, "consumer stopped consuming; it resumes when the broker and its dependencies answer", "err", err)
		for {
			failures++
			if !backoff.Sleep(ctx, backoff.Delay(c.cfg.RetryBase, c.cfg.RetryMax, failures)) {
				return nil
			}
			err := c.healthy(ctx)
			if err == nil {
				break
			}
			c.setState(err.Error())
			c.log.DebugContext(ctx, "dependency still down", "err", err)
		}
	}
	return nil
}

func (c *Consumer) healthy(ctx context.Context) error {
	if c.cfg.Healthy == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.cfg.Healthy(ctx); err != nil {
		return fmt.Errorf("%w: %w", errOutage, err)
	}
	return nil
}

// consume runs one session on one channel. It ends when ctx ends, when the channel or
// the server's consumer goes away, or when a handler meets an outage. Closing the channel
// at the end returns every delivery not acked to the queue; RabbitMQ counts that return
// once against the delivery limit, however long the outage lasts.
func (c *Consumer) consume(ctx context.Context) error {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := c.cfg.Topology.Declare(ch, func() (*amqp.Channel, error) { return c.conn.Channel(ctx) }); err != nil {
		return err
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := firstCancel(ch)
	tag := c.cfg.Name + "-" + randomTag()
	deliveries, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	c.setState("")
	c.log.InfoContext(ctx, "consuming", "prefetch", c.cfg.Prefetch, "concurrency", c.cfg.Concurrency)

	stop := make(chan struct{}) // closed: start no further delivery
	outage := make(chan error, c.cfg.Concurrency)
	batches := make(chan []amqp.Delivery)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.gather(deliveries, batches, stop)
	}()
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case ds, ok := <-batches:
					if !ok {
						return
					}
					select {
					case <-stop:
						return // gathered, not started: the channel's close returns them
					default:
					}
					if err := c.deliverAll(ctx, ds); err != nil {
						outage <- err
						return
					}
				}
			}
		}()
	}

	var end error
	select {
	case <-ctx.Done():
	case err := <-outage:
		end = err
	case <-cancelled:
		// RabbitMQ cancels a consumer whose queue was deleted and, from 4.3 on, one that
		// held a delivery past the queue's consumer timeout (3.x closes the channel
		// instead, with PRECONDITION_FAILED).
		end = errors.New("the server cancelled the consumer (its queue deleted, or a delivery held past the consumer timeout)")
	case err := <-closed:
		end = cmp.Or[error](err, errors.New("channel closed"))
	}
	c.setState(cmp.Or(errString(end), "shutting down"))
	if end != nil {
		// Logged now, not when the handlers are done: a handler held past the broker's
		// consumer timeout keeps the session waiting for as long as it runs.
		c.log.WarnContext(ctx, "consumer session ending; the handlers at work finish first", "err", end)
	}
	close(stop)
	wg.Wait() // the handlers at work finish, and ack, before the channel closes
	return end
}

// firstCancel returns a channel that receives the first basic.cancel the server sends
// on ch, and reads the others until ch is closed. RabbitMQ 4.3 sends several when it
// times a consumer's deliveries out (again as more of them time out, or are settled
// late), and a cancel notification nobody reads stalls the connection's reader for 5 s
// each (amqp091's notify timeout), the channel's close with it: the consumer came back
// 20-40 s after its held handler had ended.
func firstCancel(ch *amqp.Channel) <-chan string {
	first := make(chan string, 1)
	all := ch.NotifyCancel(make(chan string, 1))
	go func() {
		for tag := range all { // closed when ch closes
			select {
			case first <- tag:
			default:
			}
		}
	}()
	return first
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func randomTag() string { return fmt.Sprintf("%08x", rand.Uint32()) }
