package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// SessionRecoveryLimit is session_killed's bound: from the moment every session of the
// service's role was ended until its relays have published every row written before,
// its consumer has processed every event published to its queue before, and each of its
// processes answers /readyz. A pool dials again on its next query; the relay takes its
// lock again when its LISTEN connection reconnects (within 10 s); a consumer pausing on
// its database's refusal asks again every 50 ms.
const SessionRecoveryLimit = 30 * time.Second

// HalfOpenRecoveryLimit is half_open's bound: from the half-close until the relay
// publishes again. Its orphaned lock session still holds the relay id's lock on the
// server; the relay must end it itself (its own role's session), not wait for the server
// to notice, which here takes halfOpenKeep.
const HalfOpenRecoveryLimit = 20 * time.Second

// halfOpenKeep is how long half_open keeps the server's side of the orphaned
// connections open: far past HalfOpenRecoveryLimit, as a server's TCP keepalive (two
// hours by default) would, but bounded, so that a relay that waits for the server
// recovers within the run and the check can say how long it took.
const halfOpenKeep = 90 * time.Second

// sessionWatchLimit is how long session_killed and half_open keep watching past their
// bound, so that a slow recovery is measured.
const sessionWatchLimit = 2 * time.Minute

// serviceQueue is the work queue each service with a relay consumes.
var serviceQueue = map[string]string{
	"ordering":  contracts.QueueOrderingStockEvents,
	"inventory": contracts.QueueInventoryOrderPlaced,
}

// sessionKilled ends every Postgres session of the role of service f.Target
// (pg_terminate_backend, as an operator or a failing-over pooler does): every pooled
// connection, the relays' lock and LISTEN sessions, and transactions in progress, whose
// clients get an error. The harness's own connections log in as the superuser and stay.
// The check: within SessionRecoveryLimit the relays publish every row written before,
// the consumer processes every event published to its queue before, and every process
// of the service answers /readyz.
func (in *Injector) sessionKilled(ctx context.Context, f *check.Fault) {
	// Not while a queue or exchange fault stops, freezes or cuts off processes: the
	// recovery measured must be this fault's.
	var held bounded
	defer held.done()
	in.topo.RLock()
	held.hold(in.topo.RUnlock)
	ctx = context.WithoutCancel(ctx)
	procs := in.sys.ProcessesOf(f.Target)
	// Nothing else may kill or cut off the service's processes meanwhile: the recovery
	// measured must be this fault's.
	var targets []string
	for _, p := range procs {
		targets = append(targets, p.Name, p.Name+"-postgres")
	}
	if !in.guard.protect(protectWait, targets...) {
		in.record(f, false, fmt.Sprintf("skipped: other faults held %s's processes for %v", f.Target, protectWait))
		return
	}
	held.hold(func() { in.guard.unprotect(targets...) })
	role := in.sys.Cfg.DatabaseName(f.Target)
	logAt := map[*harness.Process]int64{}
	for _, p := range procs {
		logAt[p] = p.LogSize()
	}
	var ended int
	err := in.sys.DBs[f.Target].QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1 AND pid <> pg_backend_pid()`, role).Scan(&ended)
	killed := time.Now()
	held.from(killed, SessionRecoveryLimit)
	in.begin(f)
	if err != nil {
		in.fail(f, false, "pg_terminate_backend: "+err.Error())
		return
	}
	recovered, what := in.watchRecovery(ctx, f.Target, procs, killed, held.check)
	in.record(f, ended > 0, fmt.Sprintf("%d sessions of %s ended", ended, role))
	in.mu.Lock()
	f.End = f.Start // the fault is the moment the sessions were ended
	in.mu.Unlock()
	// The requests in flight meanwhile: each process logs every answer.
	var internal []string
	for _, p := range procs {
		lines, _ := p.LogSince(logAt[p])
		for _, l := range lines {
			if path, ok := answered500(l); ok {
				internal = append(internal, p.Name+" "+path)
			}
		}
	}
	c := check.FaultCheck{Checked: true, Drain: recovered, Detail: what}
	switch {
	case len(internal) > 0:
		c.Violation = check.SessionsAnswered500
		c.Detail = fmt.Sprintf("%s; %d answers 500: %s", what, len(internal), strings.Join(internal[:min(len(internal), 5)], ", "))
		in.setCheck(f, c) // an outage is no excuse for a 500
		return
	case recovered < 0 || recovered > SessionRecoveryLimit:
		c.Violation = check.SessionsSlow
		c.Detail = fmt.Sprintf("%s, bound %v", what, SessionRecoveryLimit)
	}
	in.setCheck(f, in.unlessOutage(c, killed, time.Now()))
}

// watchRecovery waits until service's relays have published every row written before
// since, its consumer has processed every event published to its queue before since,
// and each of procs answers /readyz, and returns how long after since that was
// (negative: not within sessionWatchLimit) and what it saw. It calls tick on every look.
func (in *Injector) watchRecovery(ctx context.Context, service string, procs []*harness.Process, since time.Time, tick func()) (time.Duration, string) {
	var published, processed, ready time.Duration
	var lastAsked time.Time
	for time.Since(since) < sessionWatchLimit {
		tick()
		if published == 0 {
			if n, err := pendingOf(ctx, in.sys, service, since); err == nil && n == 0 {
				published = time.Since(since)
			}
		}
		if processed == 0 {
			if n, err := unprocessedOf(ctx, in.sys, serviceQueue[service], since); err == nil && n == 0 {
				processed = time.Since(since)
			}
		}
		// /readyz every half second: each failing answer is a line in the process's log.
		if ready == 0 && time.Since(lastAsked) >= 500*time.Millisecond {
			lastAsked = time.Now()
			all := true
			for _, p := range procs {
				if status, _ := harness.Readyz(ctx, p); status != http.StatusOK {
					all = false
				}
			}
			if all {
				ready = time.Since(since)
			}
		}
		if published > 0 && processed > 0 && ready > 0 {
			what := fmt.Sprintf("rows before it published after %.1fs, events before it processed after %.1fs, every process ready after %.1fs", published.Seconds(), processed.Seconds(), ready.Seconds())
			return max(published, processed, ready), what
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1, fmt.Sprintf("not recovered within %v (published %v, processed %v, ready %v; 0: not yet)", sessionWatchLimit, published, processed, ready)
}

// pendingOf counts the rows of service's outbox written before t and not yet published.
func pendingOf(ctx context.Context, sys *harness.System, service string, t time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int
	err := sys.DBs[service].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'pending' AND created_at <= $1`, t).Scan(&n)
	return n, err
}

// unprocessedOf counts the events bound to queue that were published before t and that
// its consumer's inbox has no row of yet. The queue is named after its consumer's
// service, which is also the consumer's name in its inbox.
func unprocessedOf(ctx context.Context, sys *harness.System, queue string, t time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	consumer := strings.SplitN(queue, ".", 2)[0]
	byProducer := map[string][]string{}
	for _, q := range contracts.Topology.Queues {
		if q.Name == queue {
			for _, key := range q.Bindings {
				producer := strings.SplitN(key, ".", 2)[0]
				byProducer[producer] = append(byProducer[producer], key)
			}
		}
	}
	left := 0
	for producer, types := range byProducer {
		// The last minute before t is enough: older events were processed long ago or
		// are another fault's to account for.
		var ids []string
		rows, err := sys.DBs[producer].Query(ctx, `SELECT id::text FROM outbox WHERE state = 'published' AND event_type = ANY($1) AND published_at BETWEEN $2 AND $3`, types, t.Add(-time.Minute), t)
		if err != nil {
			return 0, fmt.Errorf("%s outbox: %w", producer, err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return 0, err
		}
		var done int
		if err := sys.DBs[consumer].QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer = $1 AND message_id = ANY($2::uuid[])`, consumer, ids).Scan(&done); err != nil {
			return 0, fmt.Errorf("%s inbox: %w", consumer, err)
		}
		left += len(ids) - done
	}
	return left, nil
}

// halfOpen half-closes every Postgres connection of the relay process f.Target: the
// process sees them end, the server keeps their sessions for halfOpenKeep, the relay
// id's lock among them, as a NAT that forgot idle connections leaves them. The check:
// within HalfOpenRecoveryLimit the relay holds its id's lock again on a new session and
// publishes again (its bookstore_outbox_published_total moves), or has nothing written
// before the half-close left pending.
func (in *Injector) halfOpen(ctx context.Context, f *check.Fault) {
	var held bounded
	defer held.done()
	in.topo.RLock() // as sessionKilled
	held.hold(in.topo.RUnlock)
	ctx = context.WithoutCancel(ctx)
	p := in.sys.Process(f.Target)
	if p == nil {
		in.fail(f, false, "no process "+f.Target)
		return
	}
	targets := []string{p.Name, p.Name + "-postgres"}
	if !in.guard.protect(protectWait, targets...) {
		in.record(f, false, fmt.Sprintf("skipped: other faults held %s for %v", p.Name, protectWait))
		return
	}
	held.hold(func() { in.guard.unprotect(targets...) })
	if err := harness.WaitUp(ctx, p, 3*time.Second, 30*time.Second); err != nil {
		in.record(f, false, "skipped: "+err.Error())
		return
	}
	base, err := harness.Published(ctx, p)
	if err != nil {
		in.record(f, false, "skipped: metrics: "+err.Error())
		return
	}
	n, ok := in.sys.OrphanPostgres(p.Name, halfOpenKeep)
	orphaned := time.Now()
	held.from(orphaned, HalfOpenRecoveryLimit)
	in.begin(f)
	if !ok {
		in.record(f, false, "skipped: "+p.Name+"'s Postgres link has no orphan proxy (the cluster profile)")
		return
	}
	// Recovered once the relay holds its id's lock again on a session of its own made
	// since (its orphan kept the old one), and it has published again or, with nothing
	// left for it (the load over, or the service's other relay took the rows), no row
	// written before the half-close is pending.
	relayID := harness.EnvValue(p.Env, "RELAY_ID")
	var again time.Duration = -1
	var relocked, published time.Duration
	for time.Since(orphaned) < sessionWatchLimit {
		held.check()
		if relocked == 0 {
			if ok, err := harness.RelayLockTakenSince(ctx, in.sys.DBs[p.Service], relayID, orphaned); err == nil && ok {
				relocked = time.Since(orphaned)
			}
		}
		if published == 0 {
			// A counter lower than before: the process was restarted meanwhile, and has
			// published since.
			if cur, err := harness.Published(ctx, p); err == nil && cur != base && cur > 0 {
				published = time.Since(orphaned)
			} else if relocked > 0 {
				if n, err := pendingOf(ctx, in.sys, p.Service, orphaned); err == nil && n == 0 {
					published = time.Since(orphaned)
				}
			}
		}
		if relocked > 0 && published > 0 {
			again = max(relocked, published)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	in.record(f, n > 0, fmt.Sprintf("%d Postgres connections of %s half-closed, their server side kept %v", n, p.Name, halfOpenKeep))
	in.mu.Lock()
	f.End = f.Start // the fault is the moment of the half-close
	in.mu.Unlock()
	var c check.FaultCheck
	switch {
	case n == 0:
		c = check.FaultCheck{Detail: "not checked: no connection was open"}
	case again < 0:
		c = check.FaultCheck{Checked: true, Drain: -1, Violation: check.HalfOpenSlow,
			Detail: fmt.Sprintf("%s not recovered in the %v after its connections were half-closed (lock of RELAY_ID %s taken again after %v, published or drained after %v; 0: never)", p.Name, sessionWatchLimit, relayID, relocked.Round(100*time.Millisecond), published.Round(100*time.Millisecond))}
	case again > HalfOpenRecoveryLimit:
		c = check.FaultCheck{Checked: true, Drain: again, Violation: check.HalfOpenSlow,
			Detail: fmt.Sprintf("%s recovered %.1fs after its connections were half-closed (lock of RELAY_ID %s taken again after %.1fs), bound %v", p.Name, again.Seconds(), relayID, relocked.Seconds(), HalfOpenRecoveryLimit)}
	default:
		c = check.FaultCheck{Checked: true, Drain: again, Detail: fmt.Sprintf("lock of RELAY_ID %s taken again after %.1fs, published or drained after %.1fs", relayID, relocked.Seconds(), published.Seconds())}
	}
	in.setCheck(f, in.unlessOutage(c, orphaned, time.Now()))
}

// answered500 reports whether a process's log line is an HTTP answer of 500, and its
// path.
func answered500(line string) (string, bool) {
	var l struct {
		Msg    string `json:"msg"`
		Path   string `json:"path"`
		Status int    `json:"status"`
	}
	if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "http request" || l.Status != http.StatusInternalServerError {
		return "", false
	}
	return l.Path, true
}
