package faults

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// The fault schedule: which fault happens when, to what, for how long, drawn from the
// seed and the flags alone. It is a pure function of the configuration and the names of
// the run's processes and links; inject.go carries it out against the running system.

// outageLinkSuffix names the links an outage of kind disables: every process's link to
// that dependency.
var outageLinkSuffix = map[string]string{check.FaultBrokerOutage: "-rabbitmq", check.FaultPostgresOutage: "-postgres"}

// Poison kinds, one per reason of the contracts a consumer must dead-letter.
var PoisonKinds = []string{event.ReasonNotJSON, event.ReasonInvalidEnvelope, event.ReasonUnknownType, event.ReasonContentMismatch}

// heldBeforeCommit are the processes of processes that run inventory's transactions,
// which consumer_timeout and late_commit hold before their commit.
func heldBeforeCommit(cfg config.Config, processes []string) []string {
	var held []string
	for _, p := range failpointProcesses(cfg)[contracts.InventoryBeforeCommit] {
		if slices.Contains(processes, p) {
			held = append(held, p)
		}
	}
	return held
}

// failpointProcesses maps each failpoint of the contracts to the processes that pass it.
func failpointProcesses(cfg config.Config) map[string][]string {
	inventory, ordering := cfg.ProcessNames("inventory"), cfg.OrderingAPIs()
	return map[string][]string{
		contracts.OrderingBeforeCommit:  ordering,
		contracts.RelayAfterPublish:     cfg.RelayProcesses(),
		contracts.InventoryBeforeCommit: inventory,
		contracts.InventoryAfterCommit:  inventory,
		contracts.NotificationAfterSend: cfg.ProcessNames("notification"),
		contracts.OrderingAfterCommit:   ordering,
		// Fires only on a cancellation (the load cancels --cancel-share of its orders).
		contracts.InventoryBeforeReleaseCommit: inventory,
	}
}

// failpointProbability is the p() a failpoint crashes with while armed: high enough to
// fire within a second or two under the load, low enough that some work passes it first.
const failpointProbability = 0.5

// Schedule draws the run's faults from the seed: FaultsPerKind of each kind at uniform
// random moments of the planned load, each with its target and duration. The same seed
// and flags give the same schedule; only the moments the system happens to be in differ.
func Schedule(cfg config.Config, processes, links []string) []check.Fault {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6661756c74)) // "fault"
	span := cfg.LoadDuration()
	lead := config.FaultLead(span)
	at := func() time.Duration {
		return lead + time.Duration(rng.Int64N(int64(max(span-2*lead, time.Millisecond))))
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	links = slices.Sorted(slices.Values(links))
	fps := failpointProcesses(cfg)
	queues := []string{contracts.QueueInventoryOrderPlaced, contracts.QueueOrderingStockEvents, contracts.QueueNotificationStockEvents}
	kinds := slices.Clone(check.FaultKinds)
	if cfg.BrokerRestart {
		kinds = append(kinds, check.FaultBrokerRestart)
	}

	out := scheduleOutages(cfg, links)
	cluster := scheduleCluster(cfg, out)
	// The heavy faults keep clear of the node faults' recovery too (empty outside the
	// cluster profile, so the other profiles' schedules are unchanged).
	avoid := slices.Clone(out)
	for _, c := range cluster {
		c.Duration = clusterBusy(c)
		avoid = append(avoid, c)
	}
	out = append(out, scheduleHeavy(cfg, processes, avoid)...)
	out = append(out, cluster...)
	for _, kind := range kinds {
		if check.IsOutage(kind) || check.IsHeavy(kind) {
			continue
		}
		n := cfg.FaultsPerKind
		if kind == check.FaultBrokerRestart {
			n = max(1, n/50) // each one stops every connection of the machine's broker
		}
		for i := range n {
			f := check.Fault{Kind: kind, At: at()}
			switch kind {
			case check.FaultKill:
				f.Target, f.Duration = pick(processes), between(100*time.Millisecond, 1500*time.Millisecond)
			case check.FaultFailpoint:
				// Cycle through the names so every failpoint is opened about equally often.
				name := contracts.Failpoints[i%len(contracts.Failpoints)]
				f.Target, f.Detail = pick(fps[name]), fmt.Sprintf("%s=p(%g)*crash", name, failpointProbability)
				f.Duration = 8 * time.Second // disarmed after this if it has not fired
			case check.FaultResetPeer, check.FaultTimeout, check.FaultLinkDown:
				f.Target, f.Duration = pick(links), between(500*time.Millisecond, 3*time.Second)
			case check.FaultLatency:
				f.Target, f.Duration = pick(links), between(time.Second, 4*time.Second)
				f.Detail = fmt.Sprintf("%dms±%dms", 100+rng.IntN(700), 50)
			case check.FaultProviderFail:
				f.Target, f.Duration = "emailprovider", between(time.Second, 4*time.Second)
				f.Detail = fmt.Sprintf("fail_rate=%.2f", 0.3+0.6*rng.Float64())
			case check.FaultProviderAmbiguous:
				f.Target, f.Duration = "emailprovider", between(time.Second, 4*time.Second)
				f.Detail = fmt.Sprintf("ambiguous_rate=%.2f", 0.2+0.5*rng.Float64())
			case check.FaultDuplicate:
				f.Target = pick([]string{"ordering", "inventory"})
				f.Detail = "republish 3 published events, twice each"
			case check.FaultPoison:
				// 3 queues and 4 kinds are coprime: any 12 in a row cover every pair.
				f.Target, f.Detail = queues[i%len(queues)], PoisonKinds[i%len(PoisonKinds)]
			case check.FaultBrokerRestart:
				f.Target, f.Duration = "rabbitmq", between(2*time.Second, 5*time.Second)
			}
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b check.Fault) int { return cmp.Compare(a.At, b.At) })
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
func scheduleHeavy(cfg config.Config, processes []string, outages []check.Fault) []check.Fault {
	n := cfg.HeavyFaultsEach()
	if n == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6865617679)) // "heavy"
	span := cfg.LoadDuration()
	lead := config.FaultLead(span)
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
	if b, ok := cfg.BudgetOf(check.FaultPostgresOutage); ok {
		consumerBudget = b.Max
	}
	var out []check.Fault
	for _, kind := range check.HeavyKinds {
		if len(cfg.HeavyKinds) > 0 && !slices.Contains(cfg.HeavyKinds, kind) {
			continue
		}
		for i := range n {
			f := check.Fault{Kind: kind}
			// How long the fault keeps the system busy, for keeping it clear of outages: a
			// queue fault freezes publishers until the queue is empty (7-20 s, mostly 7-10).
			busy := 12 * time.Second
			switch kind {
			case check.FaultBrokerAlarm:
				f.Target, f.Duration = []string{"ordering", "inventory"}[i%2], between(3*time.Second, 6*time.Second)
				f.Detail = "every publishing connection blocked; " + f.Target + "'s dropped while blocked"
				busy = f.Duration
			case check.FaultQueueDeleted:
				f.Target = queues[i%len(queues)]
			case check.FaultLateConsumer, check.FaultQueueUnbound:
				f.Target, f.Duration = queues[i%len(queues)], between(3*time.Second, 6*time.Second)
				busy += f.Duration
			case check.FaultQueueFull:
				f.Target, f.Duration = queues[i%len(queues)], between(4*time.Second, 8*time.Second)
				f.Detail = queueFullPolicy
				busy = f.Duration + 10*time.Second
			case check.FaultConsumerTimeout:
				held := heldBeforeCommit(cfg, processes)
				if len(held) == 0 {
					continue
				}
				// Held past the timeout by a few seconds: the broker takes the delivery
				// back while the handler still has its transaction open.
				f.Target, f.Duration = held[i%len(held)], between(ConsumerTimeout+2*time.Second, ConsumerTimeout+5*time.Second).Round(100*time.Millisecond)
				f.Detail = consumerTimeoutFailpoint(f.Duration)
				busy = f.Duration + 15*time.Second
			case check.FaultLateCommit:
				held := heldBeforeCommit(cfg, processes)
				if len(held) == 0 {
					continue
				}
				// Clear of the outages for its hold, as every heavy kind is for its length;
				// what comes after the commit, no gap between the default run's outages
				// would fit: an outage over it leaves the check unchecked (unlessStruck).
				// Its targets start from the second process: the first relay twin and
				// consumer_timeout start from the first, and the failpoint faults that
				// wait for this one's hold would keep the twin from its process.
				f.Target, f.Duration = held[(i+1)%len(held)], between(LateCommitHold, LateCommitHold+3*time.Second).Round(100*time.Millisecond)
				f.Detail = consumerTimeoutFailpoint(f.Duration) // the same hold, past a longer bound
				busy = f.Duration
			case check.FaultRelayTwin:
				if len(relays) == 0 {
					continue
				}
				f.Target, f.Duration = relays[i%len(relays)], between(4*time.Second, 8*time.Second)
				busy = f.Duration + 10*time.Second
			case check.FaultLongTransaction:
				// One a run, held for about half the load (minutes in make chaos, seconds
				// in a short run), ending before the load does: a second one under it
				// would hold the same horizon, and neither's figures would be its own. It
				// needs no quiet around it: an outage may come while the snapshot is held,
				// as it may in production.
				if i > 0 {
					continue
				}
				f.Target, f.Detail = "ordering,inventory,notification", "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM outbox; then idle"
				f.Duration = between(span*2/5, span/2).Round(time.Second)
				busy = 0
			case check.FaultPrivilegeRevoked:
				p := privileges[i%len(privileges)]
				// As long as an outage, well past the consumers' budget: a consumer that
				// spent deliveries on it would dead-letter the messages it held. (The
				// budget's figure assumes a redelivery at once; on a busy machine the
				// requeueing consumer took 35 deliveries in 4.8 s, and a window of
				// budget+0.5-3.5 s dead-lettered nothing.)
				f.Target, f.Detail = p.Service, p.String()
				f.Duration = between(max(cfg.OutageLength, 3*consumerBudget), max(cfg.OutageLength, 3*consumerBudget)*3/2)
				busy = f.Duration
			default:
				var ok bool
				if busy, ok = scheduleMoreHeavy(&f, i, relays); !ok {
					continue
				}
			}
			if kind == check.FaultExchangeDeleted {
				// Reserved slots, evenly over the first three quarters of the load, the
				// first at its start: the relays must find the exchange gone while they
				// publish, and the queue faults drawn before a slot may hold the
				// topology's turn (lockTopo) for a minute, past the load's end in a short
				// run.
				f.At = reservedSlot(lead+time.Duration(i)*(span-2*lead)*3/4/time.Duration(n), span, lead, busy, clearOfOutages)
				out = append(out, f)
				continue
			}
			for try := 0; ; try++ {
				f.At = lead + time.Duration(rng.Int64N(int64(max(span-2*lead, time.Millisecond))))
				if clearOfOutages(f.At, busy) || try == 1000 {
					break
				}
			}
			if kind == check.FaultLongTransaction {
				f.At = max(lead, min(f.At, span-lead-f.Duration-min(longTxBaseline, f.Duration/3)))
			}
			if kind == check.FaultRelayTwin && i == 0 {
				// The first twin at the load's start, its moment drawn all the same so
				// that the kinds after it stay where the seed put them: later, the heavy
				// faults that hold every publisher (the queue faults, a minute each) or
				// stop its service's production (privilege_revoked) left a whole
				// compare's twins with nothing to publish or no turn before the load
				// ended, and the wrong design that shares the relay id went uncaught.
				f.At = reservedSlot(lead+time.Second, span, lead, busy, clearOfOutages)
			}
			if kind == check.FaultLateCommit && f.At > span-lead-lateCommitArming {
				// Its process restarts armed, and must then get an order to hold: not in
				// the load's last seconds. The latest moment clear of the outages before,
				// or, when none is (a short run), the latest moment: an outage over its
				// hold delays the order it holds or leaves its check unchecked, but the
				// fault still holds one.
				latest := max(lead, span-lead-lateCommitArming)
				f.At = latest
				for at := latest; at >= lead; at -= 500 * time.Millisecond {
					if clearOfOutages(at, busy) {
						f.At = at
						break
					}
				}
			}
			out = append(out, f)
		}
	}
	return out
}

// reservedSlot is the moment nearest slot, later or earlier, within the load (lead to
// span-lead), at which a fault that keeps the system busy for busy is clear of the
// outages; slot itself when none is.
func reservedSlot(slot, span, lead, busy time.Duration, clearOfOutages func(at, busy time.Duration) bool) time.Duration {
	for d := time.Duration(0); d < span; d += 500 * time.Millisecond {
		if at := slot + d; at <= span-lead && clearOfOutages(at, busy) {
			return at
		}
		if at := slot - d; at >= lead && clearOfOutages(at, busy) {
			return at
		}
	}
	return slot
}

// scheduleOutages draws cfg.Outages broker outages and as many Postgres outages, taking
// turns, each lasting between OutageLength and 1.5 times it, one after another with
// random gaps of at least OutageLength: no two overlap (an outage of both at once would
// test neither), and the system has time to catch up between two. They come from a
// stream of their own, so adding them leaves the seed's other faults where they were.
func scheduleOutages(cfg config.Config, links []string) []check.Fault {
	n := 2 * cfg.Outages
	if n == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6f75746167)) // "outag"
	span := cfg.LoadDuration()
	lead := config.FaultLead(span)
	kinds := [2]string{check.FaultBrokerOutage, check.FaultPostgresOutage}
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
	out := make([]check.Fault, n)
	var busy time.Duration
	for i := range out {
		kind := kinds[(first+i)%2]
		var target []string
		for _, l := range links {
			if strings.HasSuffix(l, outageLinkSuffix[kind]) && !strings.HasPrefix(l, "emailprovider-") {
				target = append(target, l)
			}
		}
		out[i] = check.Fault{
			Kind: kind, At: lead + busy + time.Duration(i)*gap + cuts[i], Duration: lengths[i],
			Target: "all", Detail: strings.Join(target, ","),
		}
		busy += lengths[i]
	}
	return out
}

// clusterBusy is about how long a cluster fault keeps its part of the cluster away, from
// its start: a RabbitMQ node on this machine boots and rejoins in 25-80 s after it is
// started again, under the load; a failover's promotion and the old primary's
// pg_basebackup take 10-15 s. A fault that comes before the last one's part is back
// waits for it (Injector.cluster).
// The next cluster fault comes after it, and the heavy faults keep clear of it.
func clusterBusy(f check.Fault) time.Duration {
	if f.Kind == check.FaultPostgresFailover {
		return f.Duration + 15*time.Second
	}
	return f.Duration + 50*time.Second
}

// scheduleCluster draws the cluster profile's node faults (cfg.NodeLosses broker nodes
// killed and as many stopped, cfg.Failovers Postgres failovers) from a stream of their
// own, taking turns, one after another with random gaps, each after the previous one's
// part is back (clusterBusy), with the outages among them: two at once would be a double
// fault, which a three-node cluster and a single standby are not built to survive. The
// failovers cycle through the services, ordering first; the stopped nodes through the
// nodes.
//
// The outages, drawn before, are timed again in the cluster profile to take turns with
// them (outages is changed in place).
func scheduleCluster(cfg config.Config, outages []check.Fault) []check.Fault {
	if !cfg.Cluster {
		return nil
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x636c7573)) // "clus"
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var lists [3][]check.Fault
	for i := range cfg.NodeLosses {
		lists[0] = append(lists[0], check.Fault{Kind: check.FaultBrokerNodeKilled, Target: "leader", Duration: between(2*time.Second, 4*time.Second),
			Detail: "the node leading the busiest quorum queue, SIGKILL"})
		node := (i + 1) % 3
		if len(cfg.PinnedServices()) > 0 {
			node = config.PinnedNode
		}
		lists[1] = append(lists[1], check.Fault{Kind: check.FaultBrokerNodeStopped, Target: fmt.Sprintf("node-%d", node),
			Duration: between(cfg.NodeDown, cfg.NodeDown*3/2), Detail: "the node stopped, then started again"})
	}
	for i := range cfg.Failovers {
		svc := []string{"ordering", "inventory", "notification"}[i%3]
		lists[2] = append(lists[2], check.Fault{Kind: check.FaultPostgresFailover, Target: svc, Duration: between(time.Second, 2*time.Second),
			Detail: "standby cut off, primary killed, standby promoted, old primary rejoins as standby"})
	}
	var turns []check.Fault
	for i := 0; len(lists[0])+len(lists[1])+len(lists[2]) > 0; i++ {
		// Failovers every other turn, from the first: a fault the last one's overrun
		// pushes past the load's end is a broker node's, of which there are more.
		if l := &lists[[]int{2, 0, 2, 1}[i%4]]; len(*l) > 0 {
			turns = append(turns, (*l)[0])
			*l = (*l)[1:]
		}
	}
	if len(turns) == 0 {
		return nil
	}
	// The outages take turns with them: each goes in at an even spacing, and is timed
	// again with the rest (their kinds, lengths and links stay the seed's).
	seq := make([]*check.Fault, 0, len(turns)+len(outages))
	for i := range turns {
		seq = append(seq, &turns[i])
		for j := range outages {
			if j*len(turns)/len(outages) == i {
				seq = append(seq, &outages[j])
			}
		}
	}
	const margin = 3 * time.Second
	busyOf := func(f *check.Fault) time.Duration {
		if check.IsOutage(f.Kind) {
			return f.Duration + margin
		}
		return clusterBusy(*f)
	}
	span := cfg.LoadDuration()
	lead := config.FaultLead(span)
	var busy time.Duration
	for _, f := range seq {
		busy += busyOf(f)
	}
	// The free time is cut at random into a gap before each.
	free := max(span-2*lead-busy, 0)
	t := lead
	for _, f := range seq {
		t += time.Duration(rng.Int64N(int64(free)/int64(len(seq)) + 1))
		f.At = t
		t += busyOf(f)
	}
	return turns
}
