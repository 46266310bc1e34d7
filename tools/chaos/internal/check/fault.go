package check

import (
	"slices"
	"time"
)

// FaultCheck is what a fault's own check found: a fault kind whose harm the six
// invariants cannot see (a relay twin that published, which the consumers' inboxes
// then absorb) or that deserves its own figure (how long an alarm's backlog took to
// drain). checkFaults (check.go) turns the failed ones into invariant 10's violations.
type FaultCheck struct {
	Checked   bool          `json:"checked"`             // false: the fault did not get far enough to be checked, or something else explains its outcome (Note says what)
	Violation string        `json:"violation,omitempty"` // the kind of violation, when it failed
	Detail    string        `json:"detail,omitempty"`
	Drain     time.Duration `json:"drain_ns,omitempty"` // broker_alarm, queue_full: from the fault's end until every row written before it was published; consumer_timeout: from the held consumer's resumption until every event published before it was processed
}

// Recovery is what one node loss or failover cost the clients and the pipeline, measured
// from the moment the node or primary was killed or stopped. The client figures come from
// the load's history after the run (report.Recoveries); Drained from polling meanwhile.
type Recovery struct {
	Killed   time.Time     `json:"killed"`            // the node or primary went down
	Restored time.Time     `json:"restored,omitzero"` // the node rejoined, or the old primary is the new one's standby
	Promoted time.Time     `json:"promoted,omitzero"` // postgres_failover: the standby accepts writes
	Accepted time.Duration `json:"accepted_ns"`       // from Killed to the first 201 to a POST sent after it; -1: none before the load ended
	Drained  time.Duration `json:"drained_ns"`        // from Killed until every order placed before Restored was decided and both outboxes held no row written before it; -1: not within DrainLimit
	Emailed  time.Duration `json:"emailed_ns"`        // from Killed to the last outcome email of an order placed before Restored (after the run, from the provider's emails); 0: none came after Restored
	Refused  int           `json:"refused"`           // POSTs sent from Killed until the first 201 (and the promotion, for a failover) answered 503
	TimedOut int           `json:"timed_out"`         // POSTs sent in that window that timed out
	Tries    int           `json:"tries"`             // every POST sent in that window
	// The same until the node or the old primary was back (Restored): a broker node takes
	// tens of seconds to boot, and the run's other faults strike meanwhile and are
	// counted too.
	RefusedUntilBack  int    `json:"refused_until_back"`
	TimedOutUntilBack int    `json:"timed_out_until_back"`
	TriesUntilBack    int    `json:"tries_until_back"`
	Node              string `json:"node,omitempty"`     // the broker node, or the service whose primary failed over
	Queue             string `json:"queue,omitempty"`    // broker_node_killed: the busiest quorum queue, led by the node
	Messages          int    `json:"messages,omitempty"` // broker_node_killed: its messages then
}

// Fault-check violation kinds (invariant 10).
const (
	TwinPublished      = "relay twin published events under a live relay's id"
	AlarmNotDrained    = "outbox not drained after a broker alarm"
	QueueNotRestored   = "deleted queue not declared again by its consumer"
	QueueLeftUnbound   = "queue left unbound while events of its types were published"
	QueueFullLost      = "outbox rows parked dead or not drained after a queue was full"
	NodeLossStalled    = "no order decided while one broker node of three was down"
	TimeoutStalled     = "events not processed after a handler was held past the consumer timeout"
	LongTxNotCleaned   = "dead tuples of the queue tables not cleaned after a long transaction ended"
	LongTxSlowedEmails = "notification's records slowed by a long transaction"
	LongTxSlowedStock  = "inventory's stock reads slowed by a long transaction"
)

// Fault-check violation kinds of the heavy kinds in faults/exchange.go, sessions.go and
// hopeless.go, and of queue_full's rate check (invariant 10).
const (
	ExchangeSlow        = "exchange not declared again, bound and drained within its bound after it was deleted"
	SessionsSlow        = "service not recovered within its bound after its Postgres sessions were ended"
	SessionsAnswered500 = "a request answered 500, not 503, after a service's Postgres sessions were ended"
	HalfOpenSlow        = "relay not publishing again within its bound after its Postgres connections were half-closed"
	HopelessNotParked   = "hopeless message not parked in its dead-letter queue within its bound"
	QueueFullStarved    = "other event types slowed below 80% of their rate while one queue refused"
	LateCommitWaited    = "outbox rows committed behind the relays' frontier not published within the liveness bound of their commit"
)

// Fault kinds. Each opens a failure window some part of the design claims to close.
const (
	FaultKill              = "kill"               // SIGKILL a process at a random moment; restart it
	FaultFailpoint         = "failpoint"          // restart a process with a failpoint set to crash; restart it when it dies
	FaultResetPeer         = "reset_peer"         // Toxiproxy: every connection on a link is reset
	FaultTimeout           = "timeout"            // Toxiproxy: a link black-holes data, then closes
	FaultLatency           = "latency"            // Toxiproxy: a link gets slow
	FaultLinkDown          = "link_down"          // Toxiproxy: a link is disabled, then enabled
	FaultBrokerOutage      = "broker_outage"      // every service's link to RabbitMQ disabled, for longer than the relays' retry budget
	FaultPostgresOutage    = "postgres_outage"    // every service's link to Postgres disabled; consumers must pause, not spend deliveries
	FaultProviderFail      = "provider_fail"      // the email provider answers 503 to a share of sends
	FaultProviderAmbiguous = "provider_ambiguous" // the provider sends, then stalls past the caller's timeout
	FaultDuplicate         = "duplicate"          // an already-published event is published again, same id
	FaultPoison            = "poison"             // a message that can never succeed, into a work queue
	FaultBrokerRestart     = "broker_restart"     // RabbitMQ's app stopped and started (--broker-restart)

	// The heavy faults (faults/heavy.go): fewer of each, drawn from a stream of their own.
	FaultBrokerAlarm      = "broker_alarm"      // publishing connections blocked (connection.blocked), some dropped while blocked, then unblocked
	FaultQueueDeleted     = "queue_deleted"     // a work queue deleted (once empty) under traffic; its consumer declares it again
	FaultLateConsumer     = "late_consumer"     // a queue's consumers stopped and their queue deleted; they start seconds later and declare it
	FaultRelayTwin        = "relay_twin"        // a second relay process under a live relay's RELAY_ID
	FaultPrivilegeRevoked = "privilege_revoked" // a table privilege revoked from a service's role, then granted again
	FaultQueueUnbound     = "queue_unbound"     // late_consumer, but the harness declares the queue again without its bindings, as a consumer killed between its declare and its binds leaves it
	FaultQueueFull        = "queue_full"        // an operator's policy caps a work queue at length 0 with overflow reject-publish, its consumers down: the broker nacks every event bound to it
	FaultConsumerTimeout  = "consumer_timeout"  // a handler held (a once* delay failpoint) past a short consumer timeout (a policy on its queue): the broker takes the delivery back from under it
	FaultLongTransaction  = "long_transaction"  // a foreign session holds a snapshot open in each service's database while the load runs: dead tuples pile up that no vacuum may remove
)

// More heavy faults (faults/exchange.go, sessions.go, hopeless.go).
const (
	FaultExchangeDeleted = "exchange_deleted" // the events exchange deleted under traffic, its bindings with it; the relays declare and bind it again
	FaultSessionKilled   = "session_killed"   // pg_terminate_backend of every Postgres session of a service's role, the relay's lock and LISTEN sessions included
	FaultHalfOpen        = "half_open"        // a process's Postgres connections closed on the client's side only, the server's sessions left open (a NAT's idle timeout)
	FaultHopeless        = "hopeless"         // a valid event whose handler fails every time on healthy dependencies (its recipient refused for good); it must be parked in its DLQ
	FaultLateCommit      = "late_commit"      // a handler's transaction held (a once* delay failpoint) past the relays' commit window before its commit: its outbox rows commit behind their frontier
)

// The cluster faults (faults/cluster.go), only in the cluster profile (make chaos-cluster):
// the harness plays the part of a node's failure and of CloudNativePG's failover.
const (
	FaultBrokerNodeKilled  = "broker_node_killed"  // SIGKILL the RabbitMQ node leading the busiest quorum queue, then boot it again
	FaultBrokerNodeStopped = "broker_node_stopped" // stop a RabbitMQ node for longer than the relays' retry budget, then start it
	FaultPostgresFailover  = "postgres_failover"   // cut a service's standby off, kill its primary, promote the standby; the old primary rejoins as its standby
)

// ClusterKinds are the cluster profile's own kinds, in report order.
var ClusterKinds = []string{FaultBrokerNodeKilled, FaultBrokerNodeStopped, FaultPostgresFailover}

// IsCluster reports whether kind is one of ClusterKinds.
func IsCluster(kind string) bool { return slices.Contains(ClusterKinds, kind) }

// FaultKinds lists the kinds every run injects, in report order: FaultsPerKind of each,
// but Outages of each outage kind.
var FaultKinds = []string{
	FaultKill, FaultFailpoint, FaultResetPeer, FaultTimeout, FaultLatency, FaultLinkDown,
	FaultBrokerOutage, FaultPostgresOutage,
	FaultProviderFail, FaultProviderAmbiguous, FaultDuplicate, FaultPoison,
	FaultBrokerAlarm, FaultQueueDeleted, FaultLateConsumer, FaultRelayTwin, FaultPrivilegeRevoked, FaultQueueUnbound,
	FaultQueueFull, FaultConsumerTimeout, FaultLongTransaction,
	FaultExchangeDeleted, FaultSessionKilled, FaultHalfOpen, FaultHopeless, FaultLateCommit,
}

// HeavyKinds are the kinds config.Config.HeavyFaultsEach counts; each stops processes, changes the
// broker's topology or the database's privileges for seconds.
// The last one drawn last: a kind added at the end moves none of a seed's other heavy faults.
var HeavyKinds = []string{FaultBrokerAlarm, FaultQueueDeleted, FaultLateConsumer, FaultRelayTwin, FaultPrivilegeRevoked, FaultQueueUnbound, FaultQueueFull, FaultConsumerTimeout, FaultLongTransaction,
	FaultExchangeDeleted, FaultSessionKilled, FaultHalfOpen, FaultHopeless, FaultLateCommit}

// IsHeavy reports whether kind is one of HeavyKinds.
func IsHeavy(kind string) bool { return slices.Contains(HeavyKinds, kind) }

// IsOutage reports whether kind takes a whole dependency away from every service.
func IsOutage(kind string) bool { return kind == FaultBrokerOutage || kind == FaultPostgresOutage }

// Fault is one scheduled fault and, after the run, what became of it.
type Fault struct {
	ID       int           `json:"id"`
	Kind     string        `json:"kind"`
	At       time.Duration `json:"at_ns"`       // from the start of the load
	Duration time.Duration `json:"duration_ns"` // how long the fault lasts (or the process stays down)
	Target   string        `json:"target"`      // a process, link, queue or outbox
	Detail   string        `json:"detail,omitempty"`

	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	Fired bool      `json:"fired"`          // the fault really happened (a failpoint crashed, a kill hit a live process)
	Note  string    `json:"note,omitempty"` // what happened; for a fault missed for a state of the system (Fired false, no Error), why
	// Error is the harness's own error that kept the fault from being injected, or from
	// being undone: a Toxiproxy call, a management API call, a SQL statement of the
	// harness's that failed. A fault with one fails the run (checkInjection).
	Error string `json:"error,omitempty"`
	// Check is the fault's own check, for the kinds that have one (faults/heavy.go).
	Check *FaultCheck `json:"check,omitempty"`
	// Recovery is what a cluster fault cost (faults/cluster.go), nil for the other kinds.
	Recovery *Recovery `json:"recovery,omitempty"`
}
