package config

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The cluster profile (make chaos-cluster): the production topology of
// deploy/k8s/overlays/production on this machine. The run starts a three-node RabbitMQ
// cluster and, for each service of the deployment, a Postgres primary with one
// synchronous standby (CloudNativePG's one cluster per service); every service runs as
// two processes given every broker node and both Postgres hosts, and besides every
// existing fault kind the run kills and stops broker nodes and fails primaries over.
// The email provider, a third party, keeps the machine's own Postgres.

// ClusterServices are the services that get a Postgres primary and standby of their own
// in the cluster profile.
var ClusterServices = []string{"inventory", "notification", "ordering"}

// clusterProfile is make chaos-cluster's defaults. Eight minutes of the default run's
// rate: the cluster's nine extra servers share the two cores with the services, and the
// six node faults (three kills, three stops) come one at a time, each after the last
// one's node is back (a RabbitMQ node boots and rejoins in 15-80 s here under the load),
// which takes most of the eight minutes; fewer short faults than the default run (each
// still strikes a doubled system) and one outage of each kind keep a run near ten
// minutes.
var clusterProfile = struct {
	Rate          float64
	Seconds       int
	FaultsPerKind int
	Outages       int
	HeavyFaults   int
	NodeLosses    int
	Failovers     int
	NodeDown      time.Duration
	QuietTimeout  time.Duration
}{Rate: 20, Seconds: 480, FaultsPerKind: 30, Outages: 1, HeavyFaults: 1, NodeLosses: 3, Failovers: 3, NodeDown: 15 * time.Second, QuietTimeout: 3 * time.Minute}

// clusterCompare is chaos compare --profile cluster's: three designs in turn, so each run
// is half as long (three and a half minutes), with one node loss of each kind and two failovers (ordering's first,
// the one a design acknowledging locally loses orders in).
var clusterCompare = struct {
	Seconds    int
	NodeLosses int
	Failovers  int
}{Seconds: 210, NodeLosses: 1, Failovers: 2}

// applyClusterProfile sets the cluster profile's defaults for every flag not given
// (compare: chaos compare's, shorter).
func (c *Config) applyClusterProfile(fs *flag.FlagSet, compare bool) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set := func(name string, apply func()) {
		if !given[name] {
			apply()
		}
	}
	c.Cluster = true
	c.Doubled = true // two replicas of every service, as the production overlay runs them
	seconds, losses, failovers := clusterProfile.Seconds, clusterProfile.NodeLosses, clusterProfile.Failovers
	if compare {
		seconds, losses, failovers = clusterCompare.Seconds, clusterCompare.NodeLosses, clusterCompare.Failovers
	}
	set("rate", func() { c.Rate = clusterProfile.Rate })
	set("orders", func() { c.Orders = int(c.Rate * float64(seconds)) })
	set("faults", func() { c.FaultsPerKind = clusterProfile.FaultsPerKind })
	if !compare {
		set("outages", func() { c.Outages = clusterProfile.Outages }) // compare's none: see Parse
	}
	set("heavy-faults", func() { c.HeavyFaults = clusterProfile.HeavyFaults })
	set("node-losses", func() { c.NodeLosses = losses })
	set("failovers", func() { c.Failovers = failovers })
	set("node-down", func() { c.NodeDown = clusterProfile.NodeDown })
	set("quiet-timeout", func() { c.QuietTimeout = clusterProfile.QuietTimeout })
	// The default run's shrunk relay budget (3 attempts), as every other run: when a node
	// is killed its quorum queues nack publishes for seconds while they elect new leaders
	// (217 nacks in 4.6 s in one run), and a relay that spent an attempt on each parked 66
	// rows dead in the first cluster run. A nack is the broker's failure, not the event's
	// (broker.ErrNacked), so it spends none, and the small budget is what shows it.
	set("prefix", func() { c.Prefix = "chaoscluster" })
	return nil
}

// validateCluster checks the cluster flags: they need the cluster, and a stopped node
// must outlast the relays' retry budget.
func (c Config) validateCluster() []error {
	var errs []error
	if !c.Cluster {
		if c.NodeLosses > 0 || c.Failovers > 0 || c.OrderingCommit != "" || c.PinnedBroker != "" {
			errs = append(errs, errors.New("-node-losses, -failovers, -ordering-commit and -pinned-broker need -profile cluster"))
		}
		return errs
	}
	if c.NodeLosses < 0 || c.Failovers < 0 {
		errs = append(errs, errors.New("-node-losses and -failovers must not be negative"))
	}
	if b, ok := c.BudgetOf("broker_outage"); ok && b.Shrunk && c.NodeLosses > 0 && c.NodeDown <= b.Max {
		errs = append(errs, fmt.Errorf("-node-down %v does not outlast the relay budget (%s: up to %v)", c.NodeDown, b.Spends, b.Max))
	}
	switch c.OrderingCommit {
	case "", "local":
	default:
		errs = append(errs, fmt.Errorf("-ordering-commit %q: want local, or empty", c.OrderingCommit))
	}
	for _, s := range c.PinnedServices() {
		if !slices.Contains([]string{"ordering", "inventory", "notification"}, s) {
			errs = append(errs, fmt.Errorf("-pinned-broker %q: want ordering, inventory or notification", s))
		}
	}
	return errs
}

// PinnedServices are the services of -pinned-broker.
func (c Config) PinnedServices() []string {
	if c.PinnedBroker == "" {
		return nil
	}
	return strings.Split(c.PinnedBroker, ",")
}

// PinnedNode is the broker node a pinned service is given, and the one every
// broker_node_killed and broker_node_stopped strikes in that design: the node it
// depends on alone.
const PinnedNode = 0
