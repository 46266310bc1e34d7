package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// The fault schedule: which fault happens when, to what, for how long, drawn from the
// seed and the flags alone. It is a pure function of the configuration and the names of
// the run's processes and links; inject.go carries it out against the running system.

// Fault kinds. Each opens a failure window some part of the design claims to close.
const (
	faultKill              = "kill"               // SIGKILL a process at a random moment; restart it
	faultFailpoint         = "failpoint"          // restart a process with a failpoint set to crash; restart it when it dies
	faultResetPeer         = "reset_peer"         // Toxiproxy: every connection on a link is reset
	faultTimeout           = "timeout"            // Toxiproxy: a link black-holes data, then closes
	faultLatency           = "latency"            // Toxiproxy: a link gets slow
	faultLinkDown          = "link_down"          // Toxiproxy: a link is disabled, then enabled
	faultBrokerOutage      = "broker_outage"      // every service's link to RabbitMQ disabled, for longer than the relays' retry budget
	faultPostgresOutage    = "postgres_outage"    // every service's link to Postgres disabled; consumers must pause, not spend deliveries
	faultProviderFail      = "provider_fail"      // the email provider answers 503 to a share of sends
	faultProviderAmbiguous = "provider_ambiguous" // the provider sends, then stalls past the caller's timeout
	faultDuplicate         = "duplicate"          // an already-published event is published again, same id
	faultPoison            = "poison"             // a message that can never succeed, into a work queue
	faultBrokerRestart     = "broker_restart"     // RabbitMQ's app stopped and started (--broker-restart)

	// The heavy faults (heavy.go): fewer of each, drawn from a stream of their own.
	faultBrokerAlarm      = "broker_alarm"      // publishing connections blocked (connection.blocked), some dropped while blocked, then unblocked
	faultQueueDeleted     = "queue_deleted"     // a work queue deleted (once empty) under traffic; its consumer declares it again
	faultLateConsumer     = "late_consumer"     // a queue's consumers stopped and their queue deleted; they start seconds later and declare it
	faultRelayTwin        = "relay_twin"        // a second relay process under a live relay's RELAY_ID
	faultPrivilegeRevoked = "privilege_revoked" // a table privilege revoked from a service's role, then granted again
)

// faultKinds lists the kinds every run injects, in report order: FaultsPerKind of each,
// but Outages of each outage kind.
var faultKinds = []string{
	faultKill, faultFailpoint, faultResetPeer, faultTimeout, faultLatency, faultLinkDown,
	faultBrokerOutage, faultPostgresOutage,
	faultProviderFail, faultProviderAmbiguous, faultDuplicate, faultPoison,
	faultBrokerAlarm, faultQueueDeleted, faultLateConsumer, faultRelayTwin, faultPrivilegeRevoked,
}

// heavyKinds are the kinds config.heavyFaults counts; each stops processes, changes the
// broker's topology or the database's privileges for seconds.
var heavyKinds = []string{faultBrokerAlarm, faultQueueDeleted, faultLateConsumer, faultRelayTwin, faultPrivilegeRevoked}

func isHeavy(kind string) bool { return slices.Contains(heavyKinds, kind) }

// isOutage reports whether kind takes a whole dependency away from every service.
func isOutage(kind string) bool { return kind == faultBrokerOutage || kind == faultPostgresOutage }

// outageLinkSuffix names the links an outage of kind disables: every process's link to
// that dependency.
var outageLinkSuffix = map[string]string{faultBrokerOutage: "-rabbitmq", faultPostgresOutage: "-postgres"}

// Poison kinds, one per reason of the contracts a consumer must dead-letter.
var poisonKinds = []string{event.ReasonNotJSON, event.ReasonInvalidEnvelope, event.ReasonUnknownType, event.ReasonContentMismatch}

// failpointProcesses maps each failpoint of the contracts to the processes that pass it.
func failpointProcesses(cfg config) map[string][]string {
	inventory, ordering := cfg.processNames("inventory"), cfg.orderingAPIs()
	return map[string][]string{
		contracts.OrderingBeforeCommit:  ordering,
		contracts.RelayAfterPublish:     cfg.relayProcesses(),
		contracts.InventoryBeforeCommit: inventory,
		contracts.InventoryAfterCommit:  inventory,
		contracts.NotificationAfterSend: cfg.processNames("notification"),
		contracts.OrderingAfterCommit:   ordering,
		// Fires only on a cancellation (the load cancels --cancel-share of its orders).
		contracts.InventoryBeforeReleaseCommit: inventory,
	}
}

// failpointProbability is the p() a failpoint crashes with while armed: high enough to
// fire within a second or two under the load, low enough that some work passes it first.
const failpointProbability = 0.5

// fault is one scheduled fault and, after the run, what became of it.
type fault struct {
	ID       int           `json:"id"`
	Kind     string        `json:"kind"`
	At       time.Duration `json:"at_ns"`       // from the start of the load
	Duration time.Duration `json:"duration_ns"` // how long the fault lasts (or the process stays down)
	Target   string        `json:"target"`      // a process, link, queue or outbox
	Detail   string        `json:"detail,omitempty"`

	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	Fired bool      `json:"fired"` // the fault really happened (a failpoint crashed, a kill hit a live process)
	Note  string    `json:"note,omitempty"`
	// Check is the fault's own check, for the kinds that have one (heavy.go).
	Check *faultCheck `json:"check,omitempty"`
}

// schedule draws the run's faults from the seed: FaultsPerKind of each kind at uniform
// random moments of the planned load, each with its target and duration. The same seed
// and flags give the same schedule; only the moments the system happens to be in differ.
func schedule(cfg config, processes, links []string) []fault {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6661756c74)) // "fault"
	span := cfg.loadDuration()
	lead := faultLead(span)
	at := func() time.Duration {
		return lead + time.Duration(rng.Int64N(int64(max(span-2*lead, time.Millisecond))))
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	links = slices.Sorted(slices.Values(links))
	fps := failpointProcesses(cfg)
	queues := []string{contracts.QueueInventoryOrderPlaced, contracts.QueueOrderingStockEvents, contracts.QueueNotificationStockEvents}
	kinds := slices.Clone(faultKinds)
	if cfg.BrokerRestart {
		kinds = append(kinds, faultBrokerRestart)
	}

	out := scheduleOutages(cfg, links)
	out = append(out, scheduleHeavy(cfg, processes, out)...)
	for _, kind := range kinds {
		if isOutage(kind) || isHeavy(kind) {
			continue
		}
		n := cfg.FaultsPerKind
		if kind == faultBrokerRestart {
			n = max(1, n/50) // each one stops every connection of the machine's broker
		}
		for i := range n {
			f := fault{Kind: kind, At: at()}
			switch kind {
			case faultKill:
				f.Target, f.Duration = pick(processes), between(100*time.Millisecond, 1500*time.Millisecond)
			case faultFailpoint:
				// Cycle through the names so every failpoint is opened about equally often.
				name := contracts.Failpoints[i%len(contracts.Failpoints)]
				f.Target, f.Detail = pick(fps[name]), fmt.Sprintf("%s=p(%g)*crash", name, failpointProbability)
				f.Duration = 8 * time.Second // disarmed after this if it has not fired
			case faultResetPeer, faultTimeout, faultLinkDown:
				f.Target, f.Duration = pick(links), between(500*time.Millisecond, 3*time.Second)
			case faultLatency:
				f.Target, f.Duration = pick(links), between(time.Second, 4*time.Second)
				f.Detail = fmt.Sprintf("%dms±%dms", 100+rng.IntN(700), 50)
			case faultProviderFail:
				f.Target, f.Duration = "emailprovider", between(time.Second, 4*time.Second)
				f.Detail = fmt.Sprintf("fail_rate=%.2f", 0.3+0.6*rng.Float64())
			case faultProviderAmbiguous:
				f.Target, f.Duration = "emailprovider", between(time.Second, 4*time.Second)
				f.Detail = fmt.Sprintf("ambiguous_rate=%.2f", 0.2+0.5*rng.Float64())
			case faultDuplicate:
				f.Target = pick([]string{"ordering", "inventory"})
				f.Detail = "republish 3 published events, twice each"
			case faultPoison:
				// 3 queues and 4 kinds are coprime: any 12 in a row cover every pair.
				f.Target, f.Detail = queues[i%len(queues)], poisonKinds[i%len(poisonKinds)]
			case faultBrokerRestart:
				f.Target, f.Duration = "rabbitmq", between(2*time.Second, 5*time.Second)
			}
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b fault) int { return cmp.Compare(a.At, b.At) })
	for i := range out {
		out[i].ID = i
	}
	return out
}

// scheduleHeavy draws config.heavyFaults faults of each heavy kind, from a stream of
// their own (adding them moved none of a seed's other faults), each clear of every
// outage by a margin: a queue cannot drain while its consumers cannot reach the broker or
// their database, and a relay twin is checked against a live relay that keeps its lock.
// Each kind cycles through its targets, so a few faults cover them all.
func scheduleHeavy(cfg config, processes []string, outages []fault) []fault {
	n := cfg.heavyFaults()
	if n == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6865617679)) // "heavy"
	span := cfg.loadDuration()
	lead := faultLead(span)
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	const margin = 3 * time.Second
	clearOfOutages := func(at, d time.Duration) bool {
		for _, o := range outages {
			if at < o.At+o.Duration+margin && o.At < at+d+margin {
				return false
			}
		}
		return true
	}
	var relays []string
	for _, p := range failpointProcesses(cfg)[contracts.RelayAfterPublish] {
		if slices.Contains(processes, p) {
			relays = append(relays, p)
		}
	}
	slices.Sort(relays)
	queues := []string{contracts.QueueNotificationStockEvents, contracts.QueueInventoryOrderPlaced, contracts.QueueOrderingStockEvents}
	consumerBudget := time.Duration(0)
	if b, ok := cfg.budgetOf(faultPostgresOutage); ok {
		consumerBudget = b.Max
	}
	var out []fault
	for _, kind := range heavyKinds {
		for i := range n {
			f := fault{Kind: kind}
			// How long the fault keeps the system busy, for keeping it clear of outages: a
			// queue fault freezes publishers until the queue is empty (7-20 s, mostly 7-10).
			busy := 12 * time.Second
			switch kind {
			case faultBrokerAlarm:
				f.Target, f.Duration = []string{"ordering", "inventory"}[i%2], between(3*time.Second, 6*time.Second)
				f.Detail = "every publishing connection blocked; " + f.Target + "'s dropped while blocked"
				busy = f.Duration
			case faultQueueDeleted:
				f.Target = queues[i%len(queues)]
			case faultLateConsumer:
				f.Target, f.Duration = queues[i%len(queues)], between(3*time.Second, 6*time.Second)
				busy += f.Duration
			case faultRelayTwin:
				if len(relays) == 0 {
					continue
				}
				f.Target, f.Duration = relays[i%len(relays)], between(4*time.Second, 8*time.Second)
				busy = f.Duration + 10*time.Second
			case faultPrivilegeRevoked:
				p := privileges[i%len(privileges)]
				// As long as an outage, well past the consumers' budget: a consumer that
				// spent deliveries on it would dead-letter the messages it held. (The
				// budget's figure assumes a redelivery at once; on a busy machine the
				// requeueing consumer took 35 deliveries in 4.8 s, and a window of
				// budget+0.5-3.5 s dead-lettered nothing.)
				f.Target, f.Detail = p.Service, p.String()
				f.Duration = between(max(cfg.OutageLength, 3*consumerBudget), max(cfg.OutageLength, 3*consumerBudget)*3/2)
				busy = f.Duration
			}
			for try := 0; ; try++ {
				f.At = lead + time.Duration(rng.Int64N(int64(max(span-2*lead, time.Millisecond))))
				if clearOfOutages(f.At, busy) || try == 1000 {
					break
				}
			}
			out = append(out, f)
		}
	}
	return out
}

// faultLead is how long after the load's start the first fault may come, and how long
// before its planned end the last.
func faultLead(span time.Duration) time.Duration { return min(2*time.Second, span/10) }

// scheduleOutages draws cfg.Outages broker outages and as many Postgres outages, taking
// turns, each lasting between OutageLength and 1.5 times it, one after another with
// random gaps of at least OutageLength: no two overlap (an outage of both at once would
// test neither), and the system has time to catch up between two. They come from a
// stream of their own, so adding them leaves the seed's other faults where they were.
func scheduleOutages(cfg config, links []string) []fault {
	n := 2 * cfg.Outages
	if n == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6f75746167)) // "outag"
	span := cfg.loadDuration()
	lead := faultLead(span)
	kinds := [2]string{faultBrokerOutage, faultPostgresOutage}
	first := rng.IntN(2)
	lengths := make([]time.Duration, n)
	var total time.Duration
	for i := range lengths {
		lengths[i] = cfg.OutageLength + time.Duration(rng.Int64N(int64(cfg.OutageLength/2)+1))
		total += lengths[i]
	}
	// The free time is cut at n random points into n+1 gaps: before the first outage,
	// between each two (on top of the least gap), after the last. config.validate makes
	// sure it is not negative.
	gap := cfg.OutageLength
	free := max(span-2*lead-total-time.Duration(n-1)*gap, 0)
	cuts := make([]time.Duration, n)
	for i := range cuts {
		cuts[i] = time.Duration(rng.Int64N(int64(free) + 1))
	}
	slices.Sort(cuts)
	out := make([]fault, n)
	var busy time.Duration
	for i := range out {
		kind := kinds[(first+i)%2]
		var target []string
		for _, l := range links {
			if strings.HasSuffix(l, outageLinkSuffix[kind]) && !strings.HasPrefix(l, "emailprovider-") {
				target = append(target, l)
			}
		}
		out[i] = fault{
			Kind: kind, At: lead + busy + time.Duration(i)*gap + cuts[i], Duration: lengths[i],
			Target: "all", Detail: strings.Join(target, ","),
		}
		busy += lengths[i]
	}
	return out
}
