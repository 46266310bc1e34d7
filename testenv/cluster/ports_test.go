package cluster

import (
	"strconv"
	"testing"
)

// A stopped node gives its distribution port up until it boots again, on 127.0.0.1 where
// every outgoing loopback connection of the machine takes its local port from the
// ephemeral range: a port from that range was once taken meanwhile, and the node could not
// boot again (dist_port_already_used).
func TestANodesDistributionPortIsNeverOneAnOutgoingConnectionCouldTake(t *testing.T) {
	lo, hi := ephemeralPorts()
	for range 200 {
		p, err := distPort()
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if port >= lo && port <= hi {
			t.Fatalf("distribution port %d is in the ephemeral range %d-%d", port, lo, hi)
		}
		if port < 1024 {
			t.Fatalf("distribution port %d is privileged", port)
		}
	}
}
