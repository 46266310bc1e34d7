package wrongways

import "github.com/bookstore-go/bookstore/services/platform/broker"

// MandatoryAlone is t as a relay that trusts `mandatory` alone knows it: its exchanges
// without its queues. A broker.Publisher sends a copy of an event to each queue its
// topology binds to the event's type; told of none, it publishes the event once under
// its type, and takes it as published whenever the broker routes it to any queue. With
// one of two queues bound to the type missing or unbound, the other takes the event, the
// broker acks it, nothing comes back, and the missing queue's consumer never gets it.
func MandatoryAlone(t broker.Topology) broker.Topology { return t.Subset() }
