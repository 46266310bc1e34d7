package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// The heavy faults: each takes a part of the system's surroundings away for seconds in
// a way no link fault does (a broker alarm, a queue that is gone, a consumer that is not
// running yet, a second relay under a live one's id, a privilege revoked), and each has
// a wrong design that loses or strands data under it (chaos compare --designs). They stop processes
// and change the broker's topology, so they come fewer than the short faults
// (config.Config.HeavyFaultsEach) and the queue faults take turns.

// AlarmDrainLimit is how long after a broker alarm every row written before its end must
// be published. A relay that never redials a blocked connection never gets there;
// a healthy one takes a poll interval or two, plus whatever other faults cost it.
const AlarmDrainLimit = 2 * time.Minute

// guard keeps faults off the processes and links a fault must have to itself: a relay
// twin is checked against a live relay that keeps its id's lock, so while the twin runs
// nobody may kill, restart, freeze or cut off that relay. Faults that strike a target
// enter it (waiting while it is protected); a protecting fault waits until the faults in
// progress on its targets are over, another protecting fault among them: a half_open
// inside a twin's check takes the live relay's lock away, and either check then blames
// the other's fault.
type guard struct {
	mu        sync.Mutex
	changed   *sync.Cond
	busy      map[string]int
	protected map[string]int  // faults holding or waiting for a target
	owned     map[string]bool // a protecting fault has the target to itself
}

func newGuard() *guard {
	g := &guard{busy: map[string]int{}, protected: map[string]int{}, owned: map[string]bool{}}
	g.changed = sync.NewCond(&g.mu)
	return g
}

// enter waits until target is not protected and marks it busy until leave.
func (g *guard) enter(target string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.protected[target] > 0 {
		g.changed.Wait()
	}
	g.busy[target]++
}

func (g *guard) leave(target string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy[target]--
	g.changed.Broadcast()
}

// protectWait is how long a fault that needs its targets to itself waits for the faults
// on them. A failpoint holds its process for up to three windows of 8 s, and one queued
// behind another on the same process for twice that; now that protecting faults take
// turns, one may also wait for a twin's whole check.
const protectWait = time.Minute

// protect keeps new faults off targets and waits until those in progress are over,
// protecting ones too, at most timeout; it reports whether they were, and protects
// nothing when not.
func (g *guard) protect(timeout time.Duration, targets ...string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range targets {
		g.protected[t]++
	}
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() { g.mu.Lock(); g.changed.Broadcast(); g.mu.Unlock() })
	defer timer.Stop()
	for slices.ContainsFunc(targets, func(t string) bool { return g.busy[t] > 0 || g.owned[t] }) {
		if time.Now().After(deadline) {
			for _, t := range targets {
				g.protected[t]--
			}
			g.changed.Broadcast()
			return false
		}
		g.changed.Wait()
	}
	for _, t := range targets {
		g.owned[t] = true
	}
	return true
}

// fence keeps new faults off targets without waiting for those in progress, for a fault
// that measures a recovery from the state it found (exchange_deleted): nothing new may
// strike meanwhile, and waiting for a quiet moment could outlast the load. unfence ends
// it.
func (g *guard) fence(targets ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range targets {
		g.protected[t]++
	}
}

func (g *guard) unfence(targets ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range targets {
		g.protected[t]--
	}
	g.changed.Broadcast()
}

func (g *guard) unprotect(targets ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range targets {
		g.protected[t]--
		delete(g.owned, t)
	}
	g.changed.Broadcast()
}

// turns is the queue of the faults that change the broker's topology (a queue, the
// exchange, a queue's policy): one holds the turn at a time, and an urgent fault waiting
// for it goes before every other that waits. exchange_deleted is urgent: it must meet the
// load, and the queue faults ahead of it can each hold the turn for a minute.
type turns struct {
	mu     sync.Mutex
	next   *sync.Cond
	taken  bool
	urgent int // urgent faults waiting
}

func newTurns() *turns {
	t := &turns{}
	t.next = sync.NewCond(&t.mu)
	return t
}

// take waits for the turn: until nobody holds it and, for a fault that is not urgent,
// no urgent one waits.
func (t *turns) take(urgent bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if urgent {
		t.urgent++
		defer func() { t.urgent-- }()
	}
	for t.taken || (!urgent && t.urgent > 0) {
		t.next.Wait()
	}
	t.taken = true
}

// give ends the turn.
func (t *turns) give() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.taken = false
	t.next.Broadcast()
}

// lockTopo takes the topology faults' turn (urgent: before the others waiting), then
// waits for the faults that only need the topology intact (poison, duplicates, privilege
// and session faults) to end, and keeps new ones waiting until unlockTopo.
func (in *Injector) lockTopo(urgent bool) {
	in.turns.take(urgent)
	in.topo.Lock()
}

// unlockTopo ends what lockTopo began.
func (in *Injector) unlockTopo() {
	in.topo.Unlock()
	in.turns.give()
}

// bounded is what a fault that measures a recovery holds (the topology's turn or its
// read side, protected targets) for as long as the recovery may take by its bound, and
// gives up then, watching on without them: a recovery slower than its bound is a
// violation already, and waiting it out holding the topology kept every other topology
// fault waiting (a run whose events were lost kept a session fault watching, and the
// queue faults waiting, for two minutes).
type bounded struct {
	mu       sync.Mutex
	releases []func()
	until    time.Time
}

// hold adds release to what is given up at the end or when the bound has passed.
func (b *bounded) hold(release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releases = append(b.releases, release)
}

// from sets the bound: limit from start.
func (b *bounded) from(start time.Time, limit time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.until = start.Add(limit)
}

// check gives everything up once the bound has passed.
func (b *bounded) check() {
	b.mu.Lock()
	passed := !b.until.IsZero() && time.Now().After(b.until)
	b.mu.Unlock()
	if passed {
		b.done()
	}
}

// done gives everything up, last taken first.
func (b *bounded) done() {
	b.mu.Lock()
	rs := b.releases
	b.releases = nil
	b.mu.Unlock()
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i]()
	}
}

// setCheck records a fault's own check.
func (in *Injector) setCheck(f *check.Fault, c check.FaultCheck) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f.Check = &c
}

// brokerAlarm blocks every publishing connection of every process (connection.blocked,
// as a memory or disk alarm does), drops the target service's blocked publishing
// connections a third of the way in, keeps blocking the connections they open again, and
// after f.Duration unblocks them all. Then it measures how long every outbox row written
// before the alarm's end takes to be published: a publisher that kept the reason of a
// connection closed while blocked never redials, and its rows wait for good.
func (in *Injector) brokerAlarm(ctx context.Context, f *check.Fault) {
	reason := "low on memory (chaos broker_alarm " + strconv.Itoa(f.ID) + ")"
	in.guard.enter(everyPublisher) // not while a queue_full compares rates
	defer in.guard.leave(everyPublisher)
	blocked := 0
	for _, a := range in.sys.AlarmProxies() {
		blocked += a.Block(harness.PublishConnMatch, reason)
	}
	in.begin(f)
	start := time.Now()
	time.Sleep(f.Duration / 3)
	// A third of the way in, the target's blocked publishing connections are dropped; a
	// target with none blocked yet (restarting, or not publishing) is watched until one
	// is, until two thirds of the way in.
	dropped := 0
	for dropped == 0 && time.Since(start) < 2*f.Duration/3 {
		for _, p := range in.sys.ProcessesOf(f.Target) {
			for _, a := range in.sys.AlarmProxiesOf(p.Name) {
				dropped += a.DropBlocked()
			}
		}
		if dropped == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	time.Sleep(max(0, f.Duration-time.Since(start)))
	unblocked, late := 0, 0
	for _, a := range in.sys.AlarmProxies() {
		n, l := a.Unblock()
		unblocked, late = unblocked+n, late+l
	}
	end := time.Now()
	note := fmt.Sprintf("%d publishing connections blocked at once and %d when they published, %d of %s's dropped while blocked, %d unblocked at the end",
		blocked, late, dropped, f.Target, unblocked)
	in.record(f, dropped > 0, note)
	in.mu.Lock()
	f.End = end // record stamps now; the alarm ended when the connections were unblocked
	in.mu.Unlock()

	// Every row written before the alarm ended must be published, whatever else happens.
	ctx = context.WithoutCancel(ctx)
	for {
		pending, err := pendingBefore(ctx, in.sys, end)
		if err == nil && pending == 0 {
			in.setCheck(f, check.FaultCheck{Checked: true, Drain: time.Since(end)})
			return
		}
		if time.Since(end) > AlarmDrainLimit {
			in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.AlarmNotDrained,
				Detail: fmt.Sprintf("%d rows written before the alarm ended at %s still unpublished %v later (last error: %v)", pending, end.Format("15:04:05.000"), AlarmDrainLimit, err)})
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// pendingBefore counts the rows of both outboxes written before t and not yet published.
func pendingBefore(ctx context.Context, sys *harness.System, t time.Time) (int, error) {
	total := 0
	for _, svc := range []string{"ordering", "inventory"} {
		var n int
		if err := sys.DBs[svc].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'pending' AND created_at <= $1`, t).Scan(&n); err != nil {
			return 0, fmt.Errorf("%s outbox: %w", svc, err)
		}
		total += n
	}
	return total, nil
}

// queueRoles returns the processes that publish events bound to queue and those that
// consume it. A queue is named after its consumer's service; its bindings name the
// producers' (the event types' first part).
func queueRoles(sys *harness.System, queue string) (publishers, consumers []*harness.Process) {
	consumer := strings.SplitN(queue, ".", 2)[0]
	producers := map[string]bool{}
	for _, q := range contracts.Topology.Queues {
		if q.Name == queue {
			for _, b := range q.Bindings {
				producers[strings.SplitN(b, ".", 2)[0]] = true
			}
		}
	}
	for _, p := range sys.Procs {
		if producers[p.Service] {
			publishers = append(publishers, p)
		}
		// `ordering relay` publishes and consumes nothing.
		if p.Service == consumer && !slices.Contains(p.Args, "relay") {
			consumers = append(consumers, p)
		}
	}
	return publishers, consumers
}

// readyCount asks the broker itself (a passive declare, not the lagging statistics) how
// many messages wait in queue, ready.
func (m *Messages) readyCount(queue string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, err := m.channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		m.ch = nil // a failed passive declare closes the channel
		return 0, err
	}
	return q.Messages, nil
}

// quiesceQueue waits until queue is empty for good: its publishers are frozen, nothing
// is ready (asked of the broker) and the statistics show nothing ready or unacknowledged
// on readings at least a statistics interval apart, the first taken after the freeze had
// settled. A message a consumer still holds would be lost with the queue (a requeue after
// a failure, a deferral, a pause), so "ready is zero" alone is not enough. It gives up
// after timeout.
func (in *Injector) quiesceQueue(ctx context.Context, queue string, frozenAt time.Time, timeout time.Duration) error {
	const statsInterval = 6 * time.Second // the broker's collect_statistics_interval (5 s) and a margin
	deadline := time.Now().Add(timeout)
	var emptySince time.Time
	for {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not empty within %v", queue, timeout)
		}
		if !harness.Sleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
		if time.Since(frozenAt) < time.Second {
			continue // publishes sent just before the freeze may still be on the wire
		}
		info, exists, err := in.sys.QueueState(ctx, queue)
		if err != nil || !exists {
			return fmt.Errorf("%s: exists %v, %v", queue, exists, err)
		}
		ready, err := in.inject.readyCount(queue)
		if err != nil {
			return fmt.Errorf("%s: passive declare: %w", queue, err)
		}
		switch {
		case ready > 0 || info.Messages > 0 || info.Unacked > 0:
			emptySince = time.Time{}
		case emptySince.IsZero():
			emptySince = time.Now()
		case time.Since(emptySince) >= statsInterval:
			return nil
		}
	}
}

// queueQuiesceLimit bounds how long a queue fault waits for its queue to empty (a
// notification message in its retry backoff is held up to 30 s), and queueFreezeLimit
// how long it keeps the publishers frozen at a time while it waits.
const (
	queueQuiesceLimit = 60 * time.Second
	queueFreezeLimit  = 12 * time.Second
)

// waitLooksEmpty waits, nothing frozen, until queue looks empty: nothing ready (asked of
// the broker) and nothing at all in the lagging statistics.
func (in *Injector) waitLooksEmpty(ctx context.Context, queue string, deadline time.Time) error {
	for {
		info, exists, err := in.sys.QueueState(ctx, queue)
		if err == nil && !exists {
			return fmt.Errorf("%s does not exist", queue)
		}
		if err == nil && info.Messages == 0 {
			if ready, err := in.inject.readyCount(queue); err == nil && ready == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not empty within %v (last: %+v, %v)", queue, queueQuiesceLimit, info, err)
		}
		if !harness.Sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// holdProvider switches the provider's faults off while on (a provider fault then skips),
// and back to what the provider faults in force say when the last hold ends.
func (in *Injector) holdProvider(ctx context.Context, on bool) {
	in.mu.Lock()
	if on {
		in.held++
	} else {
		in.held--
	}
	state := in.provider
	if in.held > 0 {
		state = providerFaults{}
	}
	in.mu.Unlock()
	_ = in.putProviderFaults(ctx, state)
}

// queueFault deletes f.Target's queue without losing a message in it: the processes that
// publish to it are frozen (SIGSTOP) until it is empty for good, then it is deleted, and
// the publishers continue. For queue_deleted the consumers run throughout: RabbitMQ
// cancels their consumer, and they declare the queue again after a short backoff. For
// late_consumer the consumers are stopped before the delete and kept down for
// f.Duration: a consumer that starts after publishing has begun, its queue missing until
// it declares it. Meanwhile a relay must hold the events bound to the missing queue; one
// that trusts mandatory alone publishes them to the other queue they are bound to (or
// spends their attempts on returns), and they never reach this one. queue_unbound is
// late_consumer with the queue declared again at once by the harness, without its
// bindings (declareUnbound): what a consumer killed between its declare and its binds
// leaves. A relay's copy to it comes back until the relay binds it to the copy's key,
// which it must before it publishes there again (checkBound).
func (in *Injector) queueFault(ctx context.Context, f *check.Fault) {
	in.lockTopo(false) // no poison, duplicate or privilege fault while a queue is missing, and one queue fault at a time
	defer in.unlockTopo()
	// Once begun, it runs to its end even if the load ends meanwhile: heal waits for it.
	ctx = context.WithoutCancel(ctx)
	in.begin(f)
	if f.Target == contracts.QueueNotificationStockEvents {
		// Notification holds its messages while the provider fails or stalls (retries
		// paced up to 30 s): the queue empties only with the provider healthy.
		in.holdProvider(ctx, true)
		defer in.holdProvider(ctx, false)
	}
	publishers, consumers := queueRoles(in.sys, f.Target)
	for _, p := range append(slices.Clone(publishers), consumers...) {
		in.guard.enter(p.Name)
		defer in.guard.leave(p.Name)
	}
	var names []string
	for _, p := range publishers {
		names = append(names, p.Name)
	}
	// The publishers are frozen only for the last stretch: first the queue is watched,
	// everything running, until it looks empty; then they are frozen and it must stay
	// empty for a statistics interval. A freeze that does not see it empty within
	// queueFreezeLimit is undone and the watch starts again, so no fault stops the
	// publishers for long (a frozen process's connections and the work behind it wait).
	frozen := false
	thaw := func() {
		if frozen {
			for _, p := range publishers {
				p.Thaw()
			}
			frozen = false
		}
	}
	defer thaw()
	deadline := time.Now().Add(queueQuiesceLimit)
	var frozenAt time.Time
	for {
		if err := in.waitLooksEmpty(ctx, f.Target, deadline); err != nil {
			in.record(f, false, "not deleted: "+err.Error())
			return
		}
		frozenAt = time.Now()
		for _, p := range publishers {
			p.Freeze()
		}
		frozen = true
		err := in.quiesceQueue(ctx, f.Target, frozenAt, queueFreezeLimit)
		if err == nil {
			break
		}
		thaw()
		if time.Now().After(deadline) {
			in.record(f, false, "not deleted: "+err.Error())
			return
		}
	}
	late := f.Kind == check.FaultLateConsumer || f.Kind == check.FaultQueueUnbound
	unbound := f.Kind == check.FaultQueueUnbound
	heldDown := false
	release := func() {
		if heldDown {
			for _, p := range consumers {
				p.Release()
			}
			heldDown = false
		}
	}
	defer release()
	if late {
		for _, p := range consumers {
			p.HoldDown(5 * time.Second)
		}
		heldDown = true
		// A consumer stopping hands back what it had prefetched: the queue must still be
		// empty, now exactly, with nobody left to take a message out.
		if ready, err := in.inject.readyCount(f.Target); err != nil || ready > 0 {
			in.record(f, false, fmt.Sprintf("not deleted: %d messages back in the queue after its consumers stopped (%v)", ready, err))
			return
		}
	}
	frozenFor := time.Since(frozenAt)
	logAt := map[*harness.Process]int64{}
	for _, p := range consumers {
		logAt[p] = p.LogSize()
	}
	if err := in.sys.DeleteQueue(ctx, f.Target); err != nil {
		in.fail(f, false, "delete: "+err.Error())
		return
	}
	deleted := time.Now()
	if unbound {
		if err := in.inject.declareUnbound(f.Target); err != nil {
			in.fail(f, true, "deleted, not declared again unbound: "+err.Error())
			return
		}
	}
	thaw()
	thawed := time.Now()
	var downFor time.Duration
	c := check.FaultCheck{Checked: true}
	if late {
		time.Sleep(f.Duration)
		if unbound {
			// The check needs an event of the queue's types published while it is
			// unbound; when its publishers are held up by another fault meanwhile, wait
			// for one rather than judge a lull.
			for deadline := time.Now().Add(unboundWaitLimit); time.Now().Before(deadline) && !in.publishedSince(ctx, f.Target, thawed.Add(time.Second)); {
				time.Sleep(100 * time.Millisecond)
			}
			c = in.checkBound(ctx, f.Target, thawed)
		}
		release()
		downFor = time.Since(deleted)
	}
	took, ok := in.sys.WaitQueue(context.WithoutCancel(ctx), f.Target, time.Minute)
	missing := time.Since(deleted)
	note := fmt.Sprintf("publishers %s frozen %.1fs while the queue stayed empty; deleted", strings.Join(names, ", "), frozenFor.Seconds())
	if unbound {
		note += " and declared again unbound"
	}
	if late {
		var cs []string
		for _, p := range consumers {
			cs = append(cs, p.Name)
		}
		note += fmt.Sprintf("; consumers %s down %.1fs", strings.Join(cs, ", "), downFor.Seconds())
	}
	if !ok {
		in.record(f, true, note+"; not declared again within a minute; "+consumersSince(consumers, logAt))
		in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.QueueNotRestored,
			Detail: fmt.Sprintf("%s deleted at %s, still missing %v later", f.Target, deleted.Format("15:04:05.000"), missing.Round(time.Second))})
		return
	}
	if unbound {
		in.record(f, true, note) // the check's detail says what the publishers did
	} else {
		in.record(f, true, fmt.Sprintf("%s; missing %.1fs (declared again %.1fs after its consumers could)", note, missing.Seconds(), took.Seconds()))
	}
	in.setCheck(f, c)
}

// consumersSince says what each of consumers logged since its log offset in at as a
// warning or an error, and its starts and exits: the first two and last three such lines
// of each, for a queue its consumers did not declare again.
func consumersSince(consumers []*harness.Process, at map[*harness.Process]int64) string {
	var out []string
	for _, p := range consumers {
		lines, _ := p.LogSince(at[p])
		var seen []string
		for _, l := range lines {
			if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"level":"WARN"`) || strings.HasPrefix(l, "=== chaos") {
				seen = append(seen, l)
			}
		}
		if len(seen) > 5 {
			seen = append(seen[:2:2], seen[len(seen)-3:]...)
		}
		out = append(out, fmt.Sprintf("%s: %s", p.Name, strings.Join(seen, " | ")))
	}
	return strings.Join(out, "; ")
}

// declareUnbound declares queue as its consumer's Topology.Declare does, its arguments
// and its dead-letter queue, and stops before the queue's own bindings.
func (m *Messages) declareUnbound(queue string) error {
	t := contracts.Topology.Subset(queue)
	t.Queues[0].Bindings = nil // Subset copies the queue: the contracts keep theirs
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, err := m.channel()
	if err != nil {
		return err
	}
	if err := t.Declare(ch, m.conn.Channel); err != nil {
		m.ch = nil // a failed declare closes the channel
		return err
	}
	return nil
}

// unboundWaitLimit is how much longer than its length queue_unbound keeps a queue
// unbound, its consumers down, waiting for an event of its types to be published.
const unboundWaitLimit = 15 * time.Second

// publishedSince reports whether an event of a type bound to queue in the contracts was
// published since t.
func (in *Injector) publishedSince(ctx context.Context, queue string, t time.Time) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, q := range contracts.Topology.Queues {
		if q.Name != queue {
			continue
		}
		for _, key := range q.Bindings {
			producer := strings.SplitN(key, ".", 2)[0]
			var n int
			err := in.sys.DBs[producer].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'published' AND event_type = $1 AND published_at >= $2`, key, t).Scan(&n)
			if err == nil && n > 0 {
				return true
			}
		}
	}
	return false
}

// checkBound is queue_unbound's own check, made while the queue's consumers are still
// down: for every type bound to queue in the contracts whose events were published since
// the publishers were thawed, the queue must be bound by now to that type's copy key
// (broker.QueueKey), since a publisher sends each queue its own copy under that key and
// binds it when a copy comes back. A type with no event published meanwhile may stay
// unbound, and a fault with none at all (the load over) is not checked. The first second
// after the thaw is left out: a relay frozen between a confirm and its mark marks a row
// published then that reached the queue before its delete.
func (in *Injector) checkBound(ctx context.Context, queue string, thawed time.Time) check.FaultCheck {
	since := thawed.Add(time.Second)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	bound, err := in.sys.QueueBindings(ctx, queue, contracts.Topology.Exchange)
	if err != nil {
		return check.FaultCheck{Detail: "not checked: " + err.Error()}
	}
	var published, missed []string
	for _, q := range contracts.Topology.Queues {
		if q.Name != queue {
			continue
		}
		for _, key := range q.Bindings {
			producer := strings.SplitN(key, ".", 2)[0]
			var n int
			err := in.sys.DBs[producer].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'published' AND event_type = $1 AND published_at >= $2`, key, since).Scan(&n)
			if err != nil {
				return check.FaultCheck{Detail: fmt.Sprintf("not checked: %s outbox: %v", producer, err)}
			}
			if n == 0 {
				continue
			}
			published = append(published, fmt.Sprintf("%d %s", n, key))
			if !slices.Contains(bound, broker.QueueKey(key, queue)) {
				missed = append(missed, broker.QueueKey(key, queue))
			}
		}
	}
	after := time.Since(thawed).Seconds()
	switch {
	case len(published) == 0:
		return check.FaultCheck{Detail: fmt.Sprintf("not checked: no event of its types published in the %.1fs it was left unbound", after)}
	case len(missed) > 0:
		return check.FaultCheck{Checked: true, Violation: check.QueueLeftUnbound,
			Detail: fmt.Sprintf("%s not bound to %s %.1fs after the thaw; published meanwhile: %s", queue, strings.Join(missed, ", "), after, strings.Join(published, ", "))}
	}
	return check.FaultCheck{Checked: true, Detail: fmt.Sprintf("published meanwhile: %s, each type bound by then", strings.Join(published, ", "))}
}

// relayTwin starts a second relay process under the live relay f.Target's RELAY_ID for
// f.Duration: `ordering relay` for an ordering process, a whole second inventory for an
// inventory one, both with the target's environment (its links, its design). While the
// live relay holds the id's lock the twin must refuse to relay (its /readyz 503, its
// published counter 0); the old twin relayed silently beside it, and the live relay
// took back its claims as its own. Nobody may kill, freeze or cut off the live relay (or
// its database link) meanwhile, so that it keeps the lock: a twin that took over from a
// dead relay would be right to publish; nor block every publisher (twinTargets).
func (in *Injector) relayTwin(ctx context.Context, f *check.Fault) {
	p := in.sys.Process(f.Target)
	relayID := harness.EnvValue(p.Env, "RELAY_ID")
	if relayID == "" {
		in.fail(f, false, f.Target+" runs without a RELAY_ID")
		return
	}
	targets := twinTargets(p)
	if !in.guard.protect(protectWait, targets...) {
		in.record(f, false, fmt.Sprintf("skipped: other faults held %s for %v", p.Name, protectWait))
		return
	}
	defer in.guard.unprotect(targets...)
	// The live relay must hold its id's lock when the twin starts: it has run for a few
	// seconds (the lock is taken on its first database connection) and answers. Not
	// /readyz: that also fails while a queue bound to its events is missing or the broker
	// blocks it, and the smoke run's twin once waited 30 s for it in vain.
	if err := harness.WaitUp(ctx, p, 3*time.Second, 30*time.Second); err != nil {
		in.record(f, false, "skipped: "+err.Error())
		return
	}
	// Up is not enough after its Postgres link came back (an outage, a link fault that
	// ended just before): the live relay takes its lock again only when its LISTEN
	// connection reconnects, up to 10 s later, and a twin started before that takes the
	// lock first and rightly publishes.
	if err := in.waitForRelayLock(ctx, p, relayID, 30*time.Second); err != nil {
		in.record(f, false, "skipped: "+err.Error())
		return
	}
	in.begin(f)
	// A start can fail for reasons of the machine's (the shared Postgres out of
	// connections for a moment): a few tries, as a supervisor would.
	var twin *harness.TwinProcess
	var err error
	for try := 0; try < 5; try++ {
		if twin, err = harness.StartTwin(in.sys, p); err != nil {
			break
		}
		if err = twin.WaitAlive(ctx, 20*time.Second); err == nil {
			break
		}
		twin.Stop()
		twin = nil
		time.Sleep(time.Second)
	}
	if twin == nil {
		in.fail(f, false, "twin not started: "+errText(err))
		return
	}
	defer twin.Stop()
	time.Sleep(f.Duration)
	// A twin is put to the test only while its service has events to publish: one that
	// lived through a stop of its service's production (a privilege revoked, its
	// consumers held) showed nothing. It lives on until its service has published since
	// it started, at most twinTestWait more.
	relayed, rerr := in.relayedSince(ctx, p.Service, twin.Started)
	for deadline := time.Now().Add(twinTestWait); rerr == nil && relayed == 0 && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		relayed, rerr = in.relayedSince(ctx, p.Service, twin.Started)
	}
	published, merr := twin.Published(context.WithoutCancel(ctx))
	ready := twin.ReadyStatus(context.WithoutCancel(ctx))
	lived := time.Since(twin.Started)
	if merr != nil {
		in.fail(f, false, fmt.Sprintf("twin %s of RELAY_ID %s: metrics: %v", twin.Name, relayID, merr))
		return
	}
	note := fmt.Sprintf("twin under RELAY_ID %s lived %.1fs, /readyz %s, published %d; %s published %d meanwhile", relayID, lived.Seconds(), ready, published, p.Service, relayed)
	in.record(f, true, note)
	c := twinCheck(p, relayID, published, relayed, lived, ready)
	if o := in.overlappingOutage(f, check.FaultPostgresOutage); o != nil {
		// Every link to Postgres was down: the live relay lost its lock, and the twin may
		// have taken it over legitimately.
		c = check.FaultCheck{Detail: fmt.Sprintf("not checked: postgres_outage %d overlapped it", o.ID)}
	} else if rerr != nil && published == 0 {
		c = check.FaultCheck{Detail: "not checked: " + p.Service + "'s outbox: " + rerr.Error()}
	}
	in.setCheck(f, c)
}

// twinTestWait is how much longer than its length a relay twin lives when its service
// published nothing meanwhile.
const twinTestWait = 30 * time.Second

// relayedSince counts the events service's relays published since t.
func (in *Injector) relayedSince(ctx context.Context, service string, t time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var n int
	err := in.sys.DBs[service].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at >= $1`, t).Scan(&n)
	return n, err
}

// twinTargets are what a relay twin of p keeps other faults off while it runs: p and its
// database link, so that the live relay keeps its lock, and every publisher, so that no
// broker_alarm blocks the twin's connection too. A twin that cannot publish shows nothing.
func twinTargets(p *harness.Process) []string {
	return []string{p.Name, p.Name + "-postgres", everyPublisher}
}

// twinCheck is relay_twin's check, given what the twin of p published under relayID and
// what its service's relays published while it lived (the twin's rows among them). A
// twin that published nothing while nothing was published at all (a broker outage, a
// fault that blocked every relay) was never put to the test.
func twinCheck(p *harness.Process, relayID string, published, relayed int, lived time.Duration, ready string) check.FaultCheck {
	switch {
	case published > 0:
		return check.FaultCheck{Checked: true, Violation: check.TwinPublished,
			Detail: fmt.Sprintf("a second %s under RELAY_ID %s published %d events in %.1fs while %s was live (/readyz %s)", p.Service, relayID, published, lived.Seconds(), p.Name, ready)}
	case relayed == 0:
		return check.FaultCheck{Detail: fmt.Sprintf("not checked: %s published nothing in the %.1fs the twin lived", p.Service, lived.Seconds())}
	}
	return check.FaultCheck{Checked: true, Detail: fmt.Sprintf("the twin published nothing while %s's relays published %d", p.Service, relayed)}
}

// waitForRelayLock waits until the live relay p holds its id's lock, at most timeout.
func (in *Injector) waitForRelayLock(ctx context.Context, p *harness.Process, relayID string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		held, err := harness.HoldsRelayLock(qctx, in.sys.DBs[p.Service], relayID)
		cancel()
		if err == nil && held {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the live relay %s did not hold the lock of RELAY_ID %s within %v (last error: %v)", p.Name, relayID, timeout, err)
		}
		if !harness.Sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// outageBetween returns an outage (of either kind) that was in force at some moment from
// from to to, if any.
func (in *Injector) outageBetween(from, to time.Time) *check.Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := range in.Faults {
		o := &in.Faults[i]
		if check.IsOutage(o.Kind) && !o.Start.IsZero() && !o.Start.After(to) && (o.End.IsZero() || !o.End.Before(from)) {
			return o
		}
	}
	return nil
}

// unlessOutage leaves c unchecked when an outage was in force from from to to: the
// recovery measured is then the outage's as much as the fault's. The figure stays.
func (in *Injector) unlessOutage(c check.FaultCheck, from, to time.Time) check.FaultCheck {
	if o := in.outageBetween(from, to); o != nil {
		return check.FaultCheck{Drain: c.Drain, Detail: fmt.Sprintf("not checked: %s %d overlapped it; %s", o.Kind, o.ID, c.Detail)}
	}
	return c
}

// overlappingOutage returns an outage of kind that overlapped f, if any.
func (in *Injector) overlappingOutage(f *check.Fault, kind string) *check.Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := range in.Faults {
		o := &in.Faults[i]
		if o.Kind == kind && !o.Start.IsZero() && o.Start.Before(time.Now()) && (o.End.IsZero() || o.End.After(f.Start)) {
			return o
		}
	}
	return nil
}

// privilege is one privilege privilege_revoked takes away: from a service's role, on a
// table of its database.
type privilege struct {
	Service, Privilege, Table string
	What                      string // what needs it
}

// privileges are the ones privilege_revoked cycles through: the inboxes of the two
// consumers whose delivery limit the run can shrink (notification's deliveries also pay
// for the provider's failures), and the outboxes of both relays.
var privileges = []privilege{
	{"inventory", "INSERT", "inbox", "inventory's consumer"},
	{"ordering", "INSERT", "inbox", "ordering's stock-events consumer"},
	{"ordering", "UPDATE", "outbox", "ordering's relays"},
	{"inventory", "UPDATE", "outbox", "inventory's relays"},
}

// String is the privilege as GRANT and REVOKE name it, e.g. "INSERT ON inbox".
func (p privilege) String() string { return p.Privilege + " ON " + p.Table }

// privilegeRevoked revokes a privilege from a service's role for f.Duration, longer than
// the consumers' retry budget, and grants it again. A consumer must pause (the error is
// its database's refusal, not the message's fault) and a relay back off; one that
// requeued the message spent its deliveries and dead-lettered it (invariant 6).
// privilegeDDL makes the privilege faults' REVOKEs and GRANTs take turns: two on one
// table at the same moment (two faults released together by the topology lock) update
// the same catalog row, and Postgres refuses the second.
var privilegeDDL sync.Mutex

func (in *Injector) privilegeRevoked(ctx context.Context, f *check.Fault) {
	var priv privilege
	for _, p := range privileges {
		if p.Service == f.Target && p.String() == f.Detail {
			priv = p
		}
	}
	if priv.Service == "" {
		in.fail(f, false, "unknown privilege "+f.Detail)
		return
	}
	// Not while a queue fault freezes or stops processes: the refusal must meet consumers
	// and relays at work, with messages flowing (the compare run's first version revoked
	// inventory's INSERT while a late_consumer kept inventory down, and the consumer that
	// requeues refusals was never refused anything).
	in.topo.RLock()
	defer in.topo.RUnlock()
	ctx = context.WithoutCancel(ctx)
	db := in.sys.DBs[priv.Service]
	role := pgx.Identifier{in.sys.Cfg.DatabaseName(priv.Service)}.Sanitize()
	table := pgx.Identifier{priv.Table}.Sanitize()
	exec := func(ctx context.Context, sql string) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		privilegeDDL.Lock() // two at once on one table: "tuple concurrently updated"
		defer privilegeDDL.Unlock()
		_, err := db.Exec(ctx, sql)
		return err
	}
	if err := exec(ctx, fmt.Sprintf("REVOKE %s ON %s FROM %s", priv.Privilege, table, role)); err != nil {
		in.fail(f, false, "revoke: "+err.Error())
		return
	}
	in.begin(f)
	time.Sleep(f.Duration)
	// The grant must come back whatever happens: retried until it does.
	var err error
	for range 30 {
		if err = exec(context.WithoutCancel(ctx), fmt.Sprintf("GRANT %s ON %s TO %s", priv.Privilege, table, role)); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		in.fail(f, true, "grant again: "+err.Error())
		return
	}
	in.record(f, true, fmt.Sprintf("%s revoked from %s for %.1fs (%s)", f.Detail, role, f.Duration.Seconds(), priv.What))
}

// queueFullPolicy is the policy queue_full puts on its queue: what an operator sets to
// cap a queue, with the overflow that turns publishers away (the broker nacks) instead
// of dropping the oldest messages.
const queueFullPolicy = `{"max-length":0,"overflow":"reject-publish"}`

// queueFull caps f.Target at length 0 with overflow reject-publish (queueFullPolicy) for
// f.Duration, its consumers held down meanwhile, then takes the cap off and lets them
// start. A quorum queue's reject-publish is soft: it takes what comes while no more than
// max-length messages are ready in it, and a running consumer keeps it empty; held down,
// the consumers hand back what they had prefetched, or the next event fills it, and from
// then on the broker nacks every event bound to the queue. A nack is the broker's
// refusal, not the event's fault: a relay that spent an attempt on each parks the rows
// as dead, and their aggregates' later events wait behind them for good. The fault's
// own check: every row written before the cap came off is published within
// AlarmDrainLimit, and no outbox row is dead.
func (in *Injector) queueFull(ctx context.Context, f *check.Fault) {
	in.lockTopo(false) // one queue fault at a time; no poison or duplicate into a queue that nacks it
	defer in.unlockTopo()
	load := ctx // ends with the load: the rates compare only while it runs
	ctx = context.WithoutCancel(ctx)
	publishers, consumers := queueRoles(in.sys, f.Target)
	for _, p := range append(slices.Clone(publishers), consumers...) {
		in.guard.enter(p.Name)
		defer in.guard.leave(p.Name)
	}
	// The other types' rates are compared only with their producers left alone, in the
	// cap and in a baseline window of the same length just before it: a producer killed
	// or cut off in either, or catching up after that, moves its rate for reasons of its
	// own.
	quiet := otherProducers(in.sys, f.Target)
	var baseline time.Time
	var rateSkipped string
	switch {
	case len(otherTypes(f.Target)) == 0 || load.Err() != nil:
	case !in.guard.protect(30*time.Second, quiet...):
		rateSkipped = "rate not compared: other faults held " + strings.Join(quiet, ", ") + " for 30 s"
	default:
		defer in.guard.unprotect(quiet...)
		time.Sleep(queueFullSettle)
		baseline = time.Now()
		time.Sleep(f.Duration)
	}
	const policy = "chaos-queue-full"
	body, err := queueFullBody(in.sys.Cfg.DeliveryLimit, f.Target)
	if err == nil {
		err = in.putPolicy(ctx, policy, body)
	}
	if err != nil {
		in.fail(f, false, "policy: "+err.Error())
		return
	}
	in.begin(f)
	for _, p := range consumers {
		p.HoldDown(5 * time.Second)
	}
	time.Sleep(f.Duration)
	// Over the cap now means the broker was nacking: ready messages above a length of 0.
	ready, rerr := in.inject.readyCount(f.Target)
	// The cap must come off whatever happens: retried until it does.
	for range 30 {
		if err = in.putPolicy(ctx, policy, ""); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	for _, p := range consumers {
		p.Release()
	}
	end := time.Now()
	var names []string
	for _, p := range consumers {
		names = append(names, p.Name)
	}
	note := fmt.Sprintf("%s capped (%s) for %.1fs, consumers %s down; %d ready when the cap came off (%v)",
		f.Target, queueFullPolicy, f.Duration.Seconds(), strings.Join(names, ", "), ready, rerr)
	if err != nil {
		in.fail(f, true, note+"; policy not removed: "+err.Error())
	} else {
		in.record(f, true, note)
	}
	in.mu.Lock()
	f.End = end
	began := f.Start
	in.mu.Unlock()
	rate := rateCheck{detail: rateSkipped}
	if !baseline.IsZero() {
		rate = in.queueFullRate(ctx, f.Target, baseline, began, end, load.Err() == nil)
	}

	for {
		pending, perr := pendingBefore(ctx, in.sys, end)
		dead, derr := deadRows(ctx, in.sys)
		switch {
		case derr == nil && dead > 0:
			in.setCheck(f, withRate(check.FaultCheck{Checked: true, Violation: check.QueueFullLost,
				Detail: fmt.Sprintf("%d outbox rows parked dead after %s refused events for %.1fs", dead, f.Target, f.Duration.Seconds())}, rate))
			return
		case perr == nil && derr == nil && pending == 0:
			in.setCheck(f, withRate(check.FaultCheck{Checked: true, Drain: time.Since(end)}, rate))
			return
		case time.Since(end) > AlarmDrainLimit:
			in.setCheck(f, withRate(check.FaultCheck{Checked: true, Violation: check.QueueFullLost,
				Detail: fmt.Sprintf("%d rows written before the cap came off at %s still unpublished %v later (last error: %v)", pending, end.Format("15:04:05.000"), AlarmDrainLimit, cmp.Or(perr, derr))}, rate))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// putPolicy puts the policy called name, with body, on the run's vhost; an empty body
// deletes it. It asks the run's broker (System.Management): in the cluster profile a
// running node of the cluster, where the run's vhost is, not the machine's broker.
func (in *Injector) putPolicy(ctx context.Context, name, body string) error {
	path := "/api/policies/" + url.PathEscape(in.sys.Vhost) + "/" + url.PathEscape(name)
	if body == "" {
		return in.sys.Management().Do(ctx, http.MethodDelete, path, "", nil)
	}
	return in.sys.Management().Do(ctx, http.MethodPut, path, body, nil)
}

// queueFullBody is the policy queue_full puts on queue. A queue takes one policy, the
// highest priority's: the run's delivery-limit policy (--delivery-limit) on the queue is
// carried over, so the cap changes nothing else.
func queueFullBody(deliveryLimit int, queue string) (string, error) {
	var def map[string]any
	if err := json.Unmarshal([]byte(queueFullPolicy), &def); err != nil {
		return "", err
	}
	if deliveryLimit > 0 && (queue == contracts.QueueInventoryOrderPlaced || queue == contracts.QueueOrderingStockEvents) {
		def["delivery-limit"] = deliveryLimit
	}
	b, err := json.Marshal(map[string]any{
		"pattern": "^" + regexp.QuoteMeta(queue) + "$", "apply-to": "queues", "priority": 10, "definition": def,
	})
	return string(b), err
}

// deadRows counts the outbox rows parked dead in both outboxes.
func deadRows(ctx context.Context, sys *harness.System) (int, error) {
	total := 0
	for _, svc := range []string{"ordering", "inventory"} {
		var n int
		if err := sys.DBs[svc].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'dead'`).Scan(&n); err != nil {
			return 0, fmt.Errorf("%s outbox: %w", svc, err)
		}
		total += n
	}
	return total, nil
}
