// Package config is one chaos run's configuration: its flags and defaults, the load
// profile, the layout of the run's processes and the retry budgets its outages must
// outlast.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// Config is one chaos run. Every field has a flag; the zero-flag run is the default
// `make chaos`.
type Config struct {
	Orders            int           // client operations to send
	Rate              float64       // operations per second, scheduled by the clock (open model)
	MaxInFlight       int           // cap on concurrent operations; beyond it sends wait
	ShedRetries       int           // 503s with Retry-After an operation takes (waiting as asked) before it ends rejected
	Doubled           bool          // two processes of every service but the provider (the load profile)
	Profile           string        // "", "load" or "cluster": the defaults of make chaos-load or make chaos-cluster (loadprofile.go, clusterprofile.go)
	Cluster           bool          // a three-node RabbitMQ cluster and a Postgres primary with a synchronous standby per service, started by the run (clusterprofile.go)
	NodeLosses        int           // cluster: broker_node_killed faults, and as many broker_node_stopped
	Failovers         int           // cluster: postgres_failover faults
	NodeDown          time.Duration // cluster: how long a broker_node_stopped keeps its node down
	OrderingCommit    string        // cluster: synchronous_commit of ordering's connections: "" (the server's: wait for the standby) | local (a wrong design)
	PinnedBroker      string        // cluster: services given only the broker node the node faults strike (a wrong design), comma-separated; empty: none
	OrderingPoolWait  time.Duration // ORDERING_POOL_WAIT of every ordering process; 0: the service's default
	PoolSize          int           // DATABASE_MAX_CONNS of every process; 0: the services' default (12)
	Seed              uint64        // the fault schedule and the order bodies derive from it
	FaultsPerKind     int           // faults of each kind spread over the load
	Outages           int           // broker outages, and as many Postgres outages, one at a time over the load
	OutageLength      time.Duration // the shortest outage, and the least gap between two; each lasts up to 1.5 times this
	RelayMaxAttempts  int           // RELAY_MAX_ATTEMPTS of every relay: the budget a broker outage must outlast
	DeliveryLimit     int           // with a vhost policy, the delivery limit of ordering's and inventory's queues, which a Postgres outage must then outlast; 0: the queues' own
	InventoryStrategy string        // inbox | check-then-process | naive
	Cancellations     string        // INVENTORY_CANCELLATIONS: sequence | ignore-sequence
	CancelShare       float64       // share of placed orders the load cancels, half of them at once
	Publisher         string        // outbox | direct
	RelayQueueCheck   string        // RELAY_QUEUE_CHECK of ordering and inventory: bindings | mandatory
	RelayTwin         string        // RELAY_TWIN of ordering and inventory: refuse | share
	ConsumerOnRefusal string        // CONSUMER_ON_REFUSAL of every consumer: pause | requeue
	HeavyFaults       int           // faults of each heavy kind (check.HeavyKinds; long_transaction at most one); -1: FaultsPerKind/20, at least 1
	HeavyKinds        []string      // the heavy kinds the run injects; empty: every one
	BrokerRestart     bool          // also restart RabbitMQ itself (rabbitmqctl stop_app/start_app)
	BinDir            string        // where the four service binaries are
	ReportRoot        string        // reports are written to ReportRoot/<timestamp>[-design]
	Prefix            string        // names of the run's databases, roles and RabbitMQ vhost, kept after the run for inspection
	AdminURL          string        // superuser connection to Postgres; PostgresOwn: the run starts a server of its own
	AMQPURL           string        // RabbitMQ, any vhost: the run uses its own
	ManagementURL     string        // RabbitMQ management API, with credentials
	QuietTimeout      time.Duration // how long to wait for the system to go quiet
	LivenessBound     time.Duration // the longest a claimable outbox row may wait between faults while its relay is ready (invariant 12)
	LivenessGrace     time.Duration // how long after a fault's end (or its backlog's drain) the bound still does not apply
	Progress          bool          // print a live progress line
	Design            string        // the design's name in reports (set by compare)
	Designs           string        // compare: which designs to run, comma-separated parts of their names; empty: all
	Soak              SoakConfig    // the soak profile's settings (soakprofile.go)
}

// Default is `make chaos`: 5,000 orders at 20 per second, 100 faults of every kind,
// 5 broker and 5 Postgres outages of 8-12 s, about four minutes of load.
var Default = Config{
	Orders:            5000,
	Rate:              20,
	MaxInFlight:       1000,
	ShedRetries:       2,
	Seed:              1,
	FaultsPerKind:     100,
	Outages:           5,
	OutageLength:      8 * time.Second,
	RelayMaxAttempts:  3,
	DeliveryLimit:     0,
	InventoryStrategy: "inbox",
	Cancellations:     "sequence",
	CancelShare:       0.2,
	Publisher:         "outbox",
	RelayQueueCheck:   "bindings",
	RelayTwin:         "refuse",
	ConsumerOnRefusal: "pause",
	HeavyFaults:       -1,
	BinDir:            "bin",
	ReportRoot:        "reports",
	Prefix:            "chaos",
	AdminURL:          "postgres://postgres@localhost:5432/postgres?sslmode=disable",
	AMQPURL:           "amqp://guest:guest@localhost:5672/",
	ManagementURL:     "http://guest:guest@localhost:15672",
	QuietTimeout:      3 * time.Minute,
	LivenessBound:     2 * time.Second,
	LivenessGrace:     2 * time.Second,
	Progress:          true,
}

// compareDeliveryLimit is compare's -delivery-limit (see Parse).
const compareDeliveryLimit = 20

// LoadDuration is how long the load runs if the system keeps up with the rate.
func (c Config) LoadDuration() time.Duration {
	return time.Duration(float64(c.Orders) / c.Rate * float64(time.Second))
}

// DesignName names the design under test: the publisher and the inventory strategy, and
// every other choice that is not the default.
func (c Config) DesignName() string {
	if c.Design != "" {
		return c.Design
	}
	name := fmt.Sprintf("publisher=%s inventory=%s", c.Publisher, c.InventoryStrategy)
	for _, x := range []struct{ key, value, def string }{
		{"ordering-commit", c.OrderingCommit, ""},
		{"pinned-broker", c.PinnedBroker, ""},
		{"cancellations", c.Cancellations, "sequence"},
		{"relay-queue-check", c.RelayQueueCheck, "bindings"},
		{"relay-twin", c.RelayTwin, "refuse"},
		{"consumer-on-refusal", c.ConsumerOnRefusal, "pause"},
	} {
		if x.value != x.def {
			name += fmt.Sprintf(" %s=%s", x.key, x.value)
		}
	}
	return name
}

// DesignEnv is the environment that gives every process of the run the design's
// choices among the platform's wrong ways (each service reads those it knows).
func (c Config) DesignEnv() []string {
	return []string{"RELAY_QUEUE_CHECK=" + c.RelayQueueCheck, "RELAY_TWIN=" + c.RelayTwin, "CONSUMER_ON_REFUSAL=" + c.ConsumerOnRefusal}
}

// HeavyFaultsEach is how many faults of each heavy kind the run injects: each stops
// processes, deletes a queue or revokes a privilege for seconds, so there are fewer of
// them than of the short faults, but at least one of each kind whenever there are faults.
func (c Config) HeavyFaultsEach() int {
	switch {
	case c.HeavyFaults >= 0:
		return c.HeavyFaults
	case c.FaultsPerKind == 0:
		return 0
	}
	return max(1, (c.FaultsPerKind+19)/20)
}

// Parse reads the flags of one run (compare: of a comparison, which has -designs and
// smaller defaults) over the defaults and validates the result.
func Parse(args []string, stderr io.Writer, compare bool) (Config, error) {
	cfg := Default
	if compare {
		cfg.Orders = 1500 // four runs: keep the whole comparison to a few minutes
		cfg.FaultsPerKind = 30
		// The wrong designs are told apart by the short faults already; the figures of
		// docs/chaos.md's scoreboard were measured without outages.
		cfg.Outages = 0
		// A delivery limit of 20 on ordering's and inventory's queues: a consumer that
		// requeues the database's refusals (CONSUMER_ON_REFUSAL=requeue) spends it within
		// a privilege_revoked of 8-12 s and dead-letters good messages; with the queues'
		// own 50 it was requeued up to 48 times and dead-lettered nothing. The right
		// design holds such a delivery and spends none.
		cfg.DeliveryLimit = compareDeliveryLimit
	}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Orders, "orders", cfg.Orders, "orders to place")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "orders per second, sent by the clock whatever the answers (open model)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", cfg.MaxInFlight, "most orders in flight at once; later sends wait")
	fs.IntVar(&cfg.ShedRetries, "shed-retries", cfg.ShedRetries, "503s with Retry-After (ordering shed the request) an order takes, each retried after the wait it asks for, before it ends rejected")
	fs.BoolVar(&cfg.Doubled, "double", cfg.Doubled, "two processes of every service but the email provider: two ordering APIs with a relay each, two inventories, two notifications")
	fs.DurationVar(&cfg.OrderingPoolWait, "ordering-pool-wait", cfg.OrderingPoolWait, "ORDERING_POOL_WAIT of every ordering process: how long a request waits for its turn at the database before 503 (0: the service's default; 1h all but turns shedding off)")
	fs.IntVar(&cfg.PoolSize, "pool-size", cfg.PoolSize, "DATABASE_MAX_CONNS of every process (0: the services' default, 12); mind Postgres's max_connections")
	fs.StringVar(&cfg.Profile, "profile", cfg.Profile, "load: the defaults of make chaos-load (every service doubled, the load near the system's capacity, every fault kind); cluster: the defaults of make chaos-cluster (a three-node RabbitMQ cluster, a primary and a synchronous standby per service, node kills and failovers); soak: make soak (-duration of load at half the measured capacity, every fault kind at a low rate, reported per -window); flags given beside it win")
	fs.IntVar(&cfg.NodeLosses, "node-losses", cfg.NodeLosses, "cluster: broker_node_killed faults, and as many broker_node_stopped")
	fs.IntVar(&cfg.Failovers, "failovers", cfg.Failovers, "cluster: postgres_failover faults (a primary killed, its standby promoted, the old primary back as its standby)")
	fs.DurationVar(&cfg.NodeDown, "node-down", cfg.NodeDown, "cluster: how long broker_node_stopped keeps a node down; it must outlast the relays' retry budget")
	fs.StringVar(&cfg.OrderingCommit, "ordering-commit", cfg.OrderingCommit, "cluster: synchronous_commit of ordering's connections; local acknowledges an order before the standby has it (a wrong design); empty: the server's, which waits")
	fs.StringVar(&cfg.PinnedBroker, "pinned-broker", cfg.PinnedBroker, "cluster: services (comma-separated) given only the one broker node the node faults strike, as a single-address AMQP_URL (a wrong design)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the fault schedule and the order bodies: same seed, same schedule")
	fs.IntVar(&cfg.FaultsPerKind, "faults", cfg.FaultsPerKind, "faults of each kind, spread over the load")
	fs.IntVar(&cfg.Outages, "outages", cfg.Outages, "broker outages, and as many Postgres outages (every service's link down at once), one at a time, at least -outage apart")
	fs.DurationVar(&cfg.OutageLength, "outage", cfg.OutageLength, "the shortest outage; each lasts 1-1.5 times this, and it must outlast the retry budgets (-relay-max-attempts, -delivery-limit)")
	fs.IntVar(&cfg.RelayMaxAttempts, "relay-max-attempts", cfg.RelayMaxAttempts, "RELAY_MAX_ATTEMPTS of every relay, shrunk so a broker outage outlasts what the old relay spent on it")
	fs.IntVar(&cfg.DeliveryLimit, "delivery-limit", cfg.DeliveryLimit, "delivery limit of ordering's and inventory's queues (a policy on the run's vhost), shrunk so a Postgres outage outlasts what the old consumer spent on it; RabbitMQ also spends it on every crash and cut link, and 5 dead-letters valid messages in the default run; 0: the queues' own "+strconv.Itoa(broker.DeliveryLimit))
	fs.StringVar(&cfg.InventoryStrategy, "inventory-strategy", cfg.InventoryStrategy, "inbox | check-then-process | naive")
	fs.StringVar(&cfg.Cancellations, "cancellations", cfg.Cancellations, "sequence | ignore-sequence (INVENTORY_CANCELLATIONS)")
	fs.Float64Var(&cfg.CancelShare, "cancel-share", cfg.CancelShare, "share of placed orders to cancel (0-1), half right after the 201, half up to two seconds later")
	fs.StringVar(&cfg.Publisher, "publisher", cfg.Publisher, "outbox | direct")
	fs.StringVar(&cfg.RelayQueueCheck, "relay-queue-check", cfg.RelayQueueCheck, "bindings | mandatory (RELAY_QUEUE_CHECK): mandatory publishes an event while a queue bound to its type is missing")
	fs.StringVar(&cfg.RelayTwin, "relay-twin", cfg.RelayTwin, "refuse | share (RELAY_TWIN): share lets a second process under a live relay's RELAY_ID relay too")
	fs.StringVar(&cfg.ConsumerOnRefusal, "consumer-on-refusal", cfg.ConsumerOnRefusal, "pause | requeue (CONSUMER_ON_REFUSAL): requeue spends a delivery on the database refusing a privilege")
	fs.IntVar(&cfg.HeavyFaults, "heavy-faults", cfg.HeavyFaults, "faults of each heavy kind (broker_alarm, queue_deleted, late_consumer, relay_twin, privilege_revoked, queue_unbound, queue_full, consumer_timeout, exchange_deleted, session_killed, half_open, hopeless, late_commit; long_transaction at most one); -1: a twentieth of -faults, at least 1")
	fs.Func("heavy-kinds", "only these heavy kinds, comma-separated (default: every one)", func(v string) error {
		cfg.HeavyKinds = strings.Split(v, ",")
		return nil
	})
	fs.BoolVar(&cfg.BrokerRestart, "broker-restart", cfg.BrokerRestart, "also restart RabbitMQ itself (rabbitmqctl stop_app/start_app; affects everything on this machine)")
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "directory with the ordering, inventory, notification and emailprovider binaries (make build)")
	fs.StringVar(&cfg.ReportRoot, "reports", cfg.ReportRoot, "directory for the reports")
	fs.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "prefix of the run's databases, roles and vhost (reset at the start)")
	fs.StringVar(&cfg.AdminURL, "postgres", cfg.AdminURL, "Postgres superuser URL, or own: a Postgres 15 server of the run's own with the defaults (autovacuum on), started before the system and removed after it")
	fs.StringVar(&cfg.AMQPURL, "amqp", cfg.AMQPURL, "RabbitMQ URL (the run uses its own vhost)")
	fs.StringVar(&cfg.ManagementURL, "rabbitmq-management", cfg.ManagementURL, "RabbitMQ management API URL with credentials")
	fs.DurationVar(&cfg.QuietTimeout, "quiet-timeout", cfg.QuietTimeout, "how long to wait for outboxes, queues and records to settle")
	fs.DurationVar(&cfg.LivenessBound, "liveness-bound", cfg.LivenessBound, "the longest a claimable outbox row may wait between faults while its relay reports ready")
	fs.DurationVar(&cfg.LivenessGrace, "liveness-grace", cfg.LivenessGrace, "after a fault's end, or its backlog's drain if later, how long the liveness bound still does not apply")
	fs.BoolVar(&cfg.Progress, "progress", cfg.Progress, "print a live progress line")
	cfg.Soak.flags(fs)
	if compare {
		fs.StringVar(&cfg.Designs, "designs", cfg.Designs, "the designs to compare, comma-separated parts of their names (e.g. default,mandatory); empty: all")
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if err := cfg.applyProfile(fs, compare); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return cfg, cfg.Validate()
}

// Validate reports every flag value that is out of range, and outages that do not
// outlast the budgets they are set against or do not fit in the load.
func (c Config) Validate() error {
	var errs []error
	if c.Orders < 1 {
		errs = append(errs, errors.New("-orders must be at least 1"))
	}
	if c.Rate <= 0 {
		errs = append(errs, errors.New("-rate must be positive"))
	}
	if c.ShedRetries < 0 {
		errs = append(errs, errors.New("-shed-retries must not be negative"))
	}
	if c.MaxInFlight < 1 {
		errs = append(errs, errors.New("-max-in-flight must be at least 1"))
	}
	if c.FaultsPerKind < 0 {
		errs = append(errs, errors.New("-faults must not be negative"))
	}
	if c.RelayMaxAttempts < 1 {
		errs = append(errs, errors.New("-relay-max-attempts must be at least 1"))
	}
	if c.DeliveryLimit < 0 {
		errs = append(errs, errors.New("-delivery-limit must not be negative"))
	}
	if c.Outages < 0 {
		errs = append(errs, errors.New("-outages must not be negative"))
	}
	if c.Outages > 0 {
		// An outage shorter than a budget proves nothing about it: the old code would
		// have survived it too.
		for _, b := range c.Budgets() {
			if b.Shrunk && c.OutageLength <= b.Max {
				errs = append(errs, fmt.Errorf("-outage %v does not outlast the %s budget (%s: up to %v); make it longer or shrink the budget", c.OutageLength, b.Name, b.Spends, b.Max))
			}
		}
		// Outages come one after another, at least one OutageLength apart, within the load.
		span := c.LoadDuration()
		if n := 2 * c.Outages; time.Duration(n)*c.OutageLength*3/2+time.Duration(n-1)*c.OutageLength > span-2*FaultLead(span) {
			errs = append(errs, fmt.Errorf("%d outages of up to %v, at least %v apart, do not fit in a load of %v; fewer, shorter, or more orders",
				n, c.OutageLength*3/2, c.OutageLength, span.Round(time.Second)))
		}
	}
	switch c.InventoryStrategy {
	case "inbox", "check-then-process", "naive":
	default:
		errs = append(errs, fmt.Errorf("-inventory-strategy %q: want inbox, check-then-process or naive", c.InventoryStrategy))
	}
	switch c.Cancellations {
	case "sequence", "ignore-sequence":
	default:
		errs = append(errs, fmt.Errorf("-cancellations %q: want sequence or ignore-sequence", c.Cancellations))
	}
	if c.CancelShare < 0 || c.CancelShare > 1 {
		errs = append(errs, errors.New("-cancel-share must be between 0 and 1"))
	}
	switch c.Publisher {
	case "outbox", "direct":
	default:
		errs = append(errs, fmt.Errorf("-publisher %q: want outbox or direct", c.Publisher))
	}
	for _, x := range []struct{ flag, value, a, b string }{
		{"relay-queue-check", c.RelayQueueCheck, "bindings", "mandatory"},
		{"relay-twin", c.RelayTwin, "refuse", "share"},
		{"consumer-on-refusal", c.ConsumerOnRefusal, "pause", "requeue"},
	} {
		if x.value != x.a && x.value != x.b {
			errs = append(errs, fmt.Errorf("-%s %q: want %s or %s", x.flag, x.value, x.a, x.b))
		}
	}
	errs = append(errs, c.validateCluster()...)
	errs = append(errs, c.validateSoak()...)
	for _, k := range c.HeavyKinds {
		if !slices.Contains(check.HeavyKinds, k) {
			errs = append(errs, fmt.Errorf("-heavy-kinds: %q is not a heavy kind (%s)", k, strings.Join(check.HeavyKinds, ", ")))
		}
	}
	if c.HeavyFaults < -1 {
		errs = append(errs, errors.New("-heavy-faults must be -1 (automatic) or more"))
	}
	return errors.Join(errs...)
}

// FaultLead is how long after the load's start the first fault may come, and how long
// before its planned end the last.
func FaultLead(span time.Duration) time.Duration { return min(2*time.Second, span/10) }

// DatabaseName is the run's database (and role) of a service, e.g. chaos_ordering.
func (c Config) DatabaseName(service string) string { return c.Prefix + "_" + service }
