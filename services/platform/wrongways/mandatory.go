package wrongways

import "github.com/bookstore-go/bookstore/services/platform/broker"

// MandatoryAlone is t as a relay that trusts `mandatory` alone knows it: its exchanges
// without its queues. A broker.Publisher checks the queues its topology binds to an
// event's type; told of none, it checks none, and publishes an event whenever the broker
// routes it to any queue. With one of two queues bound to the type missing or unbound,
// the other takes the event, the broker acks it, nothing comes back, and the missing
// queue's consumer never gets it.
func MandatoryAlone(t broker.Topology) broker.Topology { return t.Subset() }
