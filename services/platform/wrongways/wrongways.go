// Package wrongways holds the platform's wrong designs, each beside the mechanism it gets
// wrong and plugged in at a seam that mechanism already has: a relay whose publisher is
// told of no queue, a relay process that relays under a live relay's id, a consumer
// handler whose database refusals read as the message's own failures. It is the lesson's
// code, which `make chaos-compare` and the tests run to show each one caught; it is never
// the real path. A service's main chooses one only when the environment names it, and no
// package but a main imports this one.
package wrongways

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// RelayWays are the relay's designs the environment chose: RELAY_QUEUE_CHECK (bindings,
// or mandatory) and RELAY_TWIN (refuse, or share). The first of each is the right one.
type RelayWays struct {
	QueueCheck string
	Twin       string
}

// RelayVariables returns the relay's design variables for config.Parse, bound to a
// RelayWays; a main declares them after the relay's own (RELAY_*).
func RelayVariables() (*RelayWays, []config.Var) {
	w := &RelayWays{}
	return w, []config.Var{
		config.OneOf("RELAY_QUEUE_CHECK", "bindings", "bindings: publish an event once per queue bound to its type, under a key bound to that queue alone, and hold it while one is missing or its copy comes back; mandatory: once, under its type, whenever the broker routes it to any queue (the wrong way, for make chaos-compare)",
			[]string{"bindings", "mandatory"}, &w.QueueCheck),
		config.OneOf("RELAY_TWIN", "refuse", "refuse: a process started under a live relay's RELAY_ID relays nothing while that one lives; share: it relays too, and rows it has in flight are published twice (the wrong way, for make chaos-compare)",
			[]string{"refuse", "share"}, &w.Twin),
	}
}

// Topology is the topology to give the relay's publisher: t, or under
// RELAY_QUEUE_CHECK=mandatory MandatoryAlone(t).
func (w *RelayWays) Topology(t broker.Topology) broker.Topology {
	if w.QueueCheck == "mandatory" {
		return MandatoryAlone(t)
	}
	return t
}

// Relay is what to run as the relay, which relays under id (RELAY_ID): relay, or under
// RELAY_TWIN=share RelayingTwin of it, which listens and polls on pool as the relay's
// default configuration does.
func (w *RelayWays) Relay(relay *outbox.Relay, id string, pool *pgxpool.Pool) Relay {
	if w.Twin == "share" {
		return RelayingTwin(relay, id, pool, outbox.DefaultConfig.PollInterval)
	}
	return relay
}

// ConsumerWays are the consumer's designs the environment chose: CONSUMER_ON_REFUSAL
// (pause, or requeue). The first is the right one.
type ConsumerWays struct {
	OnRefusal string
}

// ConsumerVariables returns the consumer's design variables for config.Parse, bound to
// a ConsumerWays; a main declares them after the consumer's own (CONSUMER_*).
func ConsumerVariables() (*ConsumerWays, []config.Var) {
	w := &ConsumerWays{}
	return w, []config.Var{
		config.OneOf("CONSUMER_ON_REFUSAL", "pause", "pause: a delivery whose work the database refuses (a privilege, an undefined table, a read-only standby) is held and tried again, spending no delivery; requeue: it is requeued as the message's own failure (the wrong way, for make chaos-compare)",
			[]string{"pause", "requeue"}, &w.OnRefusal),
	}
}

// Handler is the handler to give the consumer: handle, or under
// CONSUMER_ON_REFUSAL=requeue RefusalsAsFailures(handle).
func (w *ConsumerWays) Handler(handle consumer.Handler) consumer.Handler {
	if w.OnRefusal == "requeue" {
		return RefusalsAsFailures(handle)
	}
	return handle
}
