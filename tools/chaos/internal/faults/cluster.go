package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// The cluster faults (make chaos-cluster): a broker node killed or stopped and a
// Postgres primary failed over, each while the load goes on and the other faults strike.
// The harness plays the node's failure and CloudNativePG's part; the services must find
// the surviving nodes and the new primary by themselves. Each fault also measures what it
// cost: how long until the pipeline had worked off what was placed before the node came
// back (the client figures come from the load's history after the run).

// DrainLimit is how long after a cluster fault's node came back the harness waits for the
// backlog to drain before it records the drain as not reached.
const DrainLimit = 2 * time.Minute

// clusterFault carries out one cluster fault and measures its recovery.
func (in *Injector) clusterFault(ctx context.Context, f *check.Fault) {
	cl := in.sys.Cluster
	if cl == nil {
		in.fail(f, false, "no cluster: only the cluster profile has these faults")
		return
	}
	// One at a time: a fault that comes while the last one's node is still booting waits
	// (two nodes down at once would be a double fault, not the one this measures).
	in.cluster.Lock()
	defer in.cluster.Unlock()
	if ctx.Err() != nil {
		in.record(f, false, "skipped: the load ended while an earlier cluster fault held the cluster")
		return
	}
	in.begin(f)
	// Bringing a node or a primary back must not be cut short by the load's end.
	bg := context.WithoutCancel(ctx)
	rec := &check.Recovery{}
	var err error
	switch f.Kind {
	case check.FaultBrokerNodeKilled:
		err = in.killBrokerNode(bg, f, rec)
	case check.FaultBrokerNodeStopped:
		node, _ := strconv.Atoi(strings.TrimPrefix(f.Target, "node-"))
		rec.Node = f.Target
		rec.Killed = time.Now()
		if err = cl.Broker.Stop(node); err == nil {
			// A graceful stop takes seconds, serving its clients meanwhile; the check
			// counts the orders placed once it was down and the clients had had a moment
			// to dial another node.
			down := time.Now()
			time.Sleep(f.Duration)
			in.checkFlowing(bg, f, down.Add(2*time.Second))
			err = cl.Broker.Start(bg, node)
		}
		rec.Restored = time.Now()
	case check.FaultPostgresFailover:
		err = in.failover(bg, f, rec)
	}
	if !rec.Killed.IsZero() {
		in.mu.Lock()
		f.Start = rec.Killed
		in.mu.Unlock()
	}
	if err != nil {
		in.setRecovery(f, rec)
		in.fail(f, !rec.Killed.IsZero(), err.Error())
		return
	}
	rec.Drained = in.waitDrained(bg, rec.Killed, rec.Restored)
	in.setRecovery(f, rec)
	in.record(f, true, fmt.Sprintf("%s back after %v", cmp.Or(rec.Node, f.Target), rec.Restored.Sub(rec.Killed).Round(time.Millisecond)))
}

// checkFlowing checks, while a stopped node is still down, that some of the orders
// placed after since (two seconds after it went down: time for the reconnects and the
// queues' new leaders) have been confirmed or rejected (a cancellation needs no
// broker). Two nodes of three keep every quorum queue
// running, so a service that knows every node's address carries on after a reconnect,
// and one pinned to the stopped node's address alone is stranded until it is back.
func (in *Injector) checkFlowing(ctx context.Context, f *check.Fault, since time.Time) {
	var placed, decided int
	err := in.sys.DBs["ordering"].QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE status IN ('confirmed', 'rejected'))
		FROM orders WHERE created_at > $1`, since).Scan(&placed, &decided)
	switch {
	case err != nil:
		in.setCheck(f, check.FaultCheck{Detail: "not checked: " + err.Error()})
	case placed == 0:
		in.setCheck(f, check.FaultCheck{Detail: "not checked: no order placed while the node was down"})
	case decided == 0:
		in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.NodeLossStalled,
			Detail: fmt.Sprintf("%d orders placed in the %v since %s was down, none decided", placed, time.Since(since).Round(time.Millisecond), f.Target)})
	default:
		in.setCheck(f, check.FaultCheck{Checked: true, Detail: fmt.Sprintf("%d of %d orders placed since the node was down decided while it was", decided, placed)})
	}
}

// killBrokerNode kills the node that leads the quorum queue with the most messages (the
// pinned node in -pinned-broker's design), leaves it down f.Duration and boots it again.
func (in *Injector) killBrokerNode(ctx context.Context, f *check.Fault, rec *check.Recovery) error {
	b := in.sys.Cluster.Broker
	queue, messages, err := in.busiestQueue(ctx)
	if err != nil {
		return err
	}
	node, err := b.Leader(ctx, in.sys.Vhost, queue)
	if err != nil {
		return fmt.Errorf("leader of %s: %w", queue, err)
	}
	if len(in.sys.Cfg.PinnedServices()) > 0 {
		node = config.PinnedNode
	}
	rec.Node, rec.Queue, rec.Messages = fmt.Sprintf("node-%d", node), queue, messages
	rec.Killed = time.Now()
	if err := b.Kill(node); err != nil {
		return fmt.Errorf("kill node %d: %w", node, err)
	}
	time.Sleep(f.Duration)
	err = b.Start(ctx, node)
	rec.Restored = time.Now()
	if err != nil {
		return fmt.Errorf("start node %d: %w", node, err)
	}
	return nil
}

// busiestQueue returns the run's quorum work queue with the most messages (ready and
// unacknowledged), the first of the contracts' queues when all are empty.
func (in *Injector) busiestQueue(ctx context.Context) (string, int, error) {
	var queues []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Messages int    `json:"messages"`
	}
	err := in.sys.Management().Do(ctx, http.MethodGet, "/api/queues/"+url.PathEscape(in.sys.Vhost)+"?columns=name,type,messages", "", &queues)
	if err != nil {
		return "", 0, fmt.Errorf("list queues: %w", err)
	}
	var work []string
	for _, q := range contracts.Topology.Queues {
		work = append(work, q.Name)
	}
	best, most := work[0], -1
	for _, q := range queues {
		if q.Type == "quorum" && slices.Contains(work, q.Name) && q.Messages > most {
			best, most = q.Name, q.Messages
		}
	}
	return best, max(most, 0), nil
}

// failover is CloudNativePG's failover of f.Target's Postgres, with the worst timing for
// a design that acknowledges before the standby has a commit: the standby is cut off from
// its primary for f.Duration (a partition: the primary's commits then wait for it, or
// with synchronous_commit=local do not), the primary is killed with the WAL it had not
// sent, the standby let run again and promoted, and the old primary rejoins as the new
// one's synchronous standby. As CloudNativePG with dataDurability: preferred, the
// promoted primary commits alone until then (testenv/cluster's Promote clears its
// synchronous_standby_names, Rejoin sets it again).
func (in *Injector) failover(ctx context.Context, f *check.Fault, rec *check.Recovery) error {
	pg := in.sys.Cluster.Postgres[f.Target]
	if pg == nil {
		return fmt.Errorf("no Postgres cluster for %s", f.Target)
	}
	rec.Node = f.Target
	if err := pg.PauseStandby(); err != nil {
		return fmt.Errorf("pause standby: %w", err)
	}
	time.Sleep(f.Duration)
	rec.Killed = time.Now()
	errKill := pg.KillPrimary()
	errResume := pg.ResumeStandby()
	if err := errors.Join(errKill, errResume); err != nil {
		return fmt.Errorf("kill primary: %w", err)
	}
	if err := pg.Promote(ctx); err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	rec.Promoted = time.Now()
	err := pg.Rejoin(ctx)
	rec.Restored = time.Now()
	if err != nil {
		return fmt.Errorf("rejoin: %w", err)
	}
	return nil
}

// waitDrained polls until every order placed before restored is decided and neither
// outbox holds a row written before it, and returns the time from killed; -1 after
// DrainLimit.
func (in *Injector) waitDrained(ctx context.Context, killed, restored time.Time) time.Duration {
	for {
		pending, err := pendingBefore(ctx, in.sys, restored)
		if err == nil && pending == 0 {
			var undecided int
			err = in.sys.DBs["ordering"].QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'pending' AND created_at <= $1`, restored).Scan(&undecided)
			if err == nil && undecided == 0 {
				return time.Since(killed)
			}
		}
		if time.Since(restored) > DrainLimit {
			return -1
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (in *Injector) setRecovery(f *check.Fault, rec *check.Recovery) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f.Recovery = rec
}
