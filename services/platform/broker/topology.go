package broker

import (
	"errors"
	"fmt"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology is a system's exchanges and queues: a topic exchange events are published to,
// routed by their type, and one quorum queue per consuming service, each with its
// dead-letter queue behind a direct exchange. The system names them (Bookstore's are in
// services/contracts); this package declares them and publishes to them.
type Topology struct {
	Exchange           string  // the topic exchange every event is published to, under its type, or QueueKey for one queue's copy
	DeadLetterExchange string  // the direct exchange a queue dead-letters through, keyed by the queue's name
	Queues             []Queue // every queue of the system, each with the event types bound to it
}

// DeliveryLimit is each queue's x-delivery-limit: how often a message may be delivered
// before RabbitMQ dead-letters it. Only a message's own failures spend it: a consumer whose
// database is down stops consuming instead of requeueing (package consumer), so an outage
// of any length costs a message at most one return. Fifty deliveries, each after a
// backoff, is then a message that keeps failing while everything it needs is healthy; a
// message that can never succeed is rejected at its first delivery and does not wait for
// the limit.
const DeliveryLimit = 50

// Queue is one consuming service's queue and the event types bound to it.
type Queue struct {
	Name     string
	Bindings []string
}

// Subset is t with only the named queues: the exchanges and the part of the system one
// service declares, so that it needs broker permissions on nothing else. No name is the
// exchanges alone, what a service that only publishes declares. It panics on a name t
// has not: the names are constants of the system, and a typo is a programming error.
func (t Topology) Subset(queues ...string) Topology {
	out := Topology{Exchange: t.Exchange, DeadLetterExchange: t.DeadLetterExchange}
	for _, name := range queues {
		i := slices.IndexFunc(t.Queues, func(q Queue) bool { return q.Name == name })
		if i < 0 {
			panic(fmt.Sprintf("broker: topology has no queue %q", name))
		}
		out.Queues = append(out.Queues, t.Queues[i])
	}
	return out
}

// DLQ is the name of the queue's dead-letter queue.
func (q Queue) DLQ() string { return q.Name + ".dlq" }

// QueueArgs are the arguments q is declared with. A queue declared twice with different
// arguments is an error in RabbitMQ, so the services, the definitions file of docker
// compose and the tests all take them from here.
func (t Topology) QueueArgs(q Queue) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "quorum",
		"x-delivery-limit":          DeliveryLimit,
		"x-dead-letter-exchange":    t.DeadLetterExchange,
		"x-dead-letter-routing-key": q.Name,
	}
}

// DeadLetterDeliveryLimit is each dead-letter queue's delivery limit: so high that no
// operator reaches it. A dead letter waits in its DLQ until someone replays it, and every
// look (`dlq list`, a replay that stops part-way) returns it to the DLQ, which the broker
// may count as a delivery. RabbitMQ 4 gives a quorum queue without a limit a default of
// 20, and a DLQ has no dead-letter target of its own: the 21st look would drop the
// message. RabbitMQ 3.10 has no default, and reads the -1 that means "no limit" to 4 as a
// limit below every count, dropping a message at its first return; a high limit means the
// same on both.
const DeadLetterDeliveryLimit = 1_000_000

// DLQArgs are the arguments of every dead-letter queue: a quorum queue, and nothing that
// could change. Its delivery limit comes from the DeadLetterPolicy instead: a queue's
// arguments are fixed when it is first declared, and declaring it again with others is
// refused (PRECONDITION_FAILED), so a limit added as an argument would keep every service
// from starting on a broker whose DLQs were declared before it. A policy applies to
// queues that exist, and can be changed.
func DLQArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "quorum"}
}

// Policy is a RabbitMQ policy as its management API, the definitions file and the
// Messaging Topology Operator's Policy object spell it.
type Policy struct {
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`  // the names of the queues it applies to, a regular expression
	ApplyTo    string         `json:"apply-to"` // "queues"
	Priority   int            `json:"priority"` // of the policies whose pattern matches a queue, the highest applies, alone
	Definition map[string]any `json:"definition"`
}

// DeadLetterPolicy is the policy every broker of a system gives its dead-letter queues:
// DeadLetterDeliveryLimit. Whoever provisions the broker sets it on each virtual host
// (the definitions file, the production Policy object, the tests' virtual hosts); the
// services, which may not manage policies, do not. Its priority is below every policy an
// operator is likely to put on a work queue, and its pattern matches only DLQs.
func DeadLetterPolicy() Policy {
	return Policy{
		Name:       "dead-letter-queues",
		Pattern:    `\.dlq$`,
		ApplyTo:    "queues",
		Definition: map[string]any{"delivery-limit": DeadLetterDeliveryLimit},
	}
}

// Declare declares the exchanges, queues, dead-letter queues and bindings of t.
// Declarations are idempotent, so every service runs this on start, each for its own part
// of the system (Subset): the exchanges and the queues it consumes. With broker
// permissions that cover only that part, a service can neither delete nor rebind another
// service's queue, except that a publisher binds the queues its events are bound to,
// each to its copy's key (Publisher). RabbitMQ's permission checks: declaring an exchange or queue needs
// configure on it, and a queue with an x-dead-letter-exchange also read on the queue and
// write on that exchange; a binding needs write on the queue and read on the exchange.
//
// The declarations go on ch. A dead-letter queue that exists already is left as it was
// declared, whatever its arguments: an earlier release declared them with others
// (DLQArgs). Asking whether a queue exists closes the channel that asks when it does
// not, so open gives Declare a channel of its own for each such question, which it
// closes; open may be nil when t has no queues.
func (t Topology) Declare(ch *amqp.Channel, open func() (*amqp.Channel, error)) error {
	if t.Exchange == "" || t.DeadLetterExchange == "" {
		return fmt.Errorf("declare topology: no exchange named (exchange %q, dead-letter exchange %q)", t.Exchange, t.DeadLetterExchange)
	}
	if err := ch.ExchangeDeclare(t.Exchange, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.Exchange, err)
	}
	if err := ch.ExchangeDeclare(t.DeadLetterExchange, "direct", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.DeadLetterExchange, err)
	}
	for _, q := range t.Queues {
		if err := declareDLQ(ch, open, q.DLQ()); err != nil {
			return err
		}
		if err := ch.QueueBind(q.DLQ(), q.Name, t.DeadLetterExchange, false, nil); err != nil {
			return fmt.Errorf("bind %s: %w", q.DLQ(), err)
		}
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, t.QueueArgs(q)); err != nil {
			return fmt.Errorf("declare queue %s: %w", q.Name, err)
		}
		for _, key := range q.Bindings {
			if err := ch.QueueBind(q.Name, key, t.Exchange, false, nil); err != nil {
				return fmt.Errorf("bind %s to %s: %w", q.Name, key, err)
			}
		}
	}
	return nil
}

// declareDLQ declares the dead-letter queue name on ch unless it exists, which it asks
// on a channel from open.
func declareDLQ(ch *amqp.Channel, open func() (*amqp.Channel, error), name string) error {
	probe, err := open()
	if err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	_, err = probe.QueueDeclarePassive(name, true, false, false, false, nil)
	_ = probe.Close()
	var amqpErr *amqp.Error
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound:
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, DLQArgs()); err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	return nil
}
