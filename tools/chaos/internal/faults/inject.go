// Package faults is the run's nemesis: it draws the fault schedule from the seed
// (schedule.go), carries it out against the running system (inject.go, heavy.go),
// publishes duplicates and poison straight to the broker (messages.go), and records
// what became of each fault.
package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// Injector carries out a schedule against a running system.
type Injector struct {
	sys      *harness.System
	inject   *Messages
	Faults   []check.Fault
	mu       sync.Mutex // guards faults' result fields and provider
	provider providerFaults
	fpMu     map[string]*sync.Mutex   // one armed failpoint per process at a time
	fired    map[string]chan string   // failpoint crashes, by process
	wanted   map[string]chan struct{} // a late commit waits for the process's failpoint turn
	started  atomic.Int64
	wg       sync.WaitGroup
	held     int          // queue faults that hold the provider healthy (guarded by mu)
	guard    *guard       // keeps faults off what a relay twin's check needs
	topo     sync.RWMutex // held by a queue fault; poison and duplicates wait while a queue is missing
	turns    *turns       // the topology faults' turn (lockTopo)
	cluster  sync.Mutex   // held by a cluster fault until its node or primary is back: one at a time
	refused  []string     // recipients the provider refuses for good (hopeless); guarded by mu
}

type providerFaults struct {
	FailRate      float64  `json:"fail_rate"`
	AmbiguousRate float64  `json:"ambiguous_rate"`
	Latency       string   `json:"latency"`
	RefuseTo      []string `json:"refuse_to,omitempty"` // set by putProviderFaults from Injector.refused
}

// NewInjector prepares schedule for sys.
func NewInjector(sys *harness.System, inject *Messages, schedule []check.Fault) *Injector {
	in := &Injector{sys: sys, inject: inject, Faults: schedule, fpMu: map[string]*sync.Mutex{}, fired: map[string]chan string{}, wanted: map[string]chan struct{}{}, guard: newGuard(), turns: newTurns()}
	for _, p := range sys.Procs {
		in.fpMu[p.Name] = &sync.Mutex{}
		in.fired[p.Name] = make(chan string, 1)
		in.wanted[p.Name] = make(chan struct{}, 1)
	}
	return in
}

// FailpointFired is the processes' callback for a crash at a failpoint.
func (in *Injector) FailpointFired(p *harness.Process, spec string) {
	select {
	case in.fired[p.Name] <- spec:
	default:
	}
}

// Run starts each fault at its moment until ctx ends or the schedule is done; faults
// already started run to their end. Wait waits for them.
func (in *Injector) Run(ctx context.Context, start time.Time) {
	for i := range in.Faults {
		if !harness.Sleep(ctx, time.Until(start.Add(in.Faults[i].At))) {
			in.mu.Lock()
			for j := i; j < len(in.Faults); j++ {
				in.Faults[j].Note = "not started: the load ended before its moment"
			}
			in.mu.Unlock()
			return
		}
		in.started.Add(1)
		in.wg.Add(1)
		go func(f *check.Fault) {
			defer in.wg.Done()
			in.apply(ctx, f)
		}(&in.Faults[i])
	}
}

// wait waits for every started fault to end.
func (in *Injector) wait() { in.wg.Wait() }

// StartedCount is how many faults have started so far.
func (in *Injector) StartedCount() int { return int(in.started.Load()) }

// FaultResults returns the schedule with what became of each fault.
func (in *Injector) FaultResults() []check.Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.Faults)
}

func (in *Injector) record(f *check.Fault, fired bool, note string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f.Fired = fired
	f.Note = note
	if f.Start.IsZero() {
		f.Start = time.Now()
	}
	f.End = time.Now()
}

// fail records that the harness could not inject f (or, fired, could not undo it) because
// of its own error, which fails the run. A fault missed for a state of the system (a
// process that was down, a queue that did not empty) is recorded with record and its
// reason instead.
func (in *Injector) fail(f *check.Fault, fired bool, msg string) {
	in.record(f, fired, msg)
	in.mu.Lock()
	defer in.mu.Unlock()
	f.Error = msg
}

func (in *Injector) begin(f *check.Fault) {
	in.mu.Lock()
	f.Start = time.Now()
	in.mu.Unlock()
}

// apply carries out one fault. ctx ends with the load: a fault that has not begun by
// then is skipped, one that has begun runs to its end (a link is always brought back up).
func (in *Injector) apply(ctx context.Context, f *check.Fault) {
	switch f.Kind {
	case check.FaultKill, check.FaultFailpoint, check.FaultResetPeer, check.FaultTimeout, check.FaultLatency, check.FaultLinkDown:
		// A process or a link that a relay twin's check needs to itself is left alone
		// until the twin is gone.
		in.guard.enter(f.Target)
		defer in.guard.leave(f.Target)
	}
	in.begin(f)
	switch f.Kind {
	case check.FaultKill:
		in.kill(ctx, f)
	case check.FaultFailpoint:
		in.failpoint(ctx, f)
	case check.FaultBrokerAlarm:
		in.brokerAlarm(ctx, f)
	case check.FaultQueueDeleted, check.FaultLateConsumer, check.FaultQueueUnbound:
		in.queueFault(ctx, f)
	case check.FaultRelayTwin:
		in.relayTwin(ctx, f)
	case check.FaultQueueFull:
		in.queueFull(ctx, f)
	case check.FaultConsumerTimeout:
		in.consumerTimeout(ctx, f)
	case check.FaultLongTransaction:
		in.longTransaction(ctx, f)
	case check.FaultPrivilegeRevoked:
		in.privilegeRevoked(ctx, f)
	case check.FaultExchangeDeleted:
		in.exchangeDeleted(ctx, f)
	case check.FaultSessionKilled:
		in.sessionKilled(ctx, f)
	case check.FaultHalfOpen:
		in.halfOpen(ctx, f)
	case check.FaultHopeless:
		in.hopeless(ctx, f)
	case check.FaultLateCommit:
		in.lateCommit(ctx, f)
	case check.FaultResetPeer:
		in.toxic(f, "reset_peer", toxiclient.Attributes{"timeout": 0})
	case check.FaultTimeout:
		in.toxic(f, "timeout", toxiclient.Attributes{"timeout": f.Duration.Milliseconds()})
	case check.FaultLatency:
		var ms, jitter int
		fmt.Sscanf(f.Detail, "%dms±%dms", &ms, &jitter)
		in.toxic(f, "latency", toxiclient.Attributes{"latency": ms, "jitter": jitter})
	case check.FaultLinkDown:
		if err := in.sys.Net.Down(f.Target); err != nil {
			in.fail(f, false, err.Error())
			return
		}
		time.Sleep(f.Duration)
		if err := in.sys.Net.Up(f.Target); err != nil {
			in.fail(f, true, err.Error())
			return
		}
		in.record(f, true, "")
	case check.FaultBrokerOutage, check.FaultPostgresOutage:
		in.outage(f)
	case check.FaultProviderFail, check.FaultProviderAmbiguous:
		in.providerFault(ctx, f)
	case check.FaultDuplicate:
		in.topo.RLock() // not while a queue is missing: its copy would be lost
		n, err := in.inject.duplicate(ctx, f.Target, 3, 2)
		in.topo.RUnlock()
		in.record(f, n > 0, cmp.Or(errText(err), fmt.Sprintf("%d copies published", n)))
	case check.FaultPoison:
		// An id-reused poison needs an event its consumer has finished; early in the run
		// or deep in a backlog there may be none yet, so it looks again for a while.
		var p check.PoisonMessage
		var err error
		for range 10 {
			in.topo.RLock() // not while a queue is missing: the poison would be dropped, not dead-lettered
			p, err = in.inject.poison(ctx, f.Target, f.Detail)
			in.topo.RUnlock()
			if err == nil || !harness.Sleep(ctx, time.Second) {
				break
			}
		}
		if err != nil {
			in.record(f, false, err.Error())
			return
		}
		in.record(f, true, "message_id "+p.MessageID)
	case check.FaultBrokerNodeKilled, check.FaultBrokerNodeStopped, check.FaultPostgresFailover:
		in.clusterFault(ctx, f)
	case check.FaultBrokerRestart:
		err := rabbitmqctl(ctx, "stop_app")
		time.Sleep(f.Duration)
		err2 := rabbitmqctl(context.WithoutCancel(ctx), "start_app") // never leave the broker stopped
		if err != nil || err2 != nil {
			in.fail(f, err == nil, cmp.Or(errText(err), errText(err2)))
			return
		}
		in.record(f, true, "")
	}
}

func (in *Injector) kill(ctx context.Context, f *check.Fault) {
	p := in.sys.Process(f.Target)
	// A process that is down already (killed a moment ago, restarting) is tried again
	// shortly: the fault is a kill of a live process.
	for range 100 {
		if p.Kill(f.Duration) {
			in.record(f, true, "")
			return
		}
		if p.Held() {
			// Frozen or kept down by a heavy fault: a kill that waited would fire the
			// moment it starts again, with every other kill that waited, over and over.
			in.record(f, false, "process held by a heavy fault")
			return
		}
		if !harness.Sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	in.record(f, false, "process was never up to kill")
}

func (in *Injector) failpoint(ctx context.Context, f *check.Fault) {
	p := in.sys.Process(f.Target)
	mu := in.fpMu[p.Name]
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() != nil {
		in.record(f, false, "skipped: the load ended while an earlier failpoint held the process")
		return
	}
	in.begin(f)
	select { // a crash from an earlier window that nobody waited for
	case <-in.fired[p.Name]:
	default:
	}
	// A window can pass without the failpoint firing (the process was cut off by a link
	// fault, or had nothing to do); it stays armed for a few more before giving up, unless
	// a late commit waits for the process (takeForHold).
	p.Restart(f.Detail, 5*time.Second)
	note, yielded := "did not fire within its windows; disarmed", false
	for window := 1; window <= 3; window++ {
		var wanted <-chan struct{}
		if window > 1 {
			wanted = in.wanted[p.Name]
		}
		select {
		case <-in.fired[p.Name]:
			// The supervisor restarts it without the failpoint: the window is closed.
			in.record(f, true, fmt.Sprintf("crashed at %s (window %d)", strings.SplitN(f.Detail, "=", 2)[0], window))
			return
		case <-time.After(f.Duration):
		case <-wanted:
			note = fmt.Sprintf("did not fire in %d of its 3 windows; disarmed for a late commit waiting for the process", window-1)
			yielded = true
		}
		if ctx.Err() != nil || yielded {
			break
		}
	}
	if p.ArmedFailpoints() == f.Detail {
		p.Restart("", 5*time.Second)
	}
	in.record(f, false, note)
}

// outage disables every link of f.Detail at once and enables them again after
// f.Duration. Its Start and End are the moments the last link went down and the first
// came back: the time no service could reach the dependency, which the report sets
// against the budget it had to outlast. A link_down fault on one of the links at the
// same time nests (network.down counts), so neither fault cuts the other short.
func (in *Injector) outage(f *check.Fault) {
	links := strings.Split(f.Detail, ",")
	var down []string
	var errs []error
	for _, l := range links {
		if err := in.sys.Net.Down(l); err != nil {
			errs = append(errs, err)
			continue
		}
		down = append(down, l)
	}
	in.begin(f)
	time.Sleep(f.Duration)
	in.mu.Lock()
	f.End = time.Now()
	in.mu.Unlock()
	for _, l := range down {
		if err := in.sys.Net.Up(l); err != nil {
			errs = append(errs, err)
		}
	}
	note := fmt.Sprintf("%d links down", len(down))
	if err := errors.Join(errs...); err != nil {
		note += ": " + err.Error()
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	f.Fired = len(down) == len(links) && len(links) > 0
	f.Note = note
	if len(errs) > 0 {
		f.Error = note
	}
}

func (in *Injector) toxic(f *check.Fault, typ string, attrs toxiclient.Attributes) {
	name := fmt.Sprintf("%s-%d", typ, f.ID)
	if err := in.sys.Net.AddToxic(f.Target, name, typ, attrs); errors.Is(err, harness.ErrLinkBusy) {
		in.record(f, false, "missed: "+err.Error())
		return
	} else if err != nil {
		in.fail(f, false, err.Error())
		return
	}
	time.Sleep(f.Duration)
	if err := in.sys.Net.RemoveToxic(f.Target, name); err != nil {
		in.fail(f, true, err.Error())
		return
	}
	in.record(f, true, "")
}

func (in *Injector) providerFault(ctx context.Context, f *check.Fault) {
	var rate float64
	fmt.Sscanf(f.Detail[strings.Index(f.Detail, "=")+1:], "%g", &rate)
	set := func(on bool) error {
		in.mu.Lock()
		v := 0.0
		if on {
			v = rate
		}
		if f.Kind == check.FaultProviderFail {
			in.provider.FailRate = v
		} else {
			in.provider.AmbiguousRate = v
		}
		state := in.provider
		if in.held > 0 {
			state = providerFaults{} // a queue fault waits for notification's queue to empty
		}
		in.mu.Unlock()
		return in.putProviderFaults(ctx, state)
	}
	in.mu.Lock()
	held := in.held > 0
	in.mu.Unlock()
	if held {
		in.record(f, false, "skipped: a queue fault held the provider healthy while notification's queue emptied")
		return
	}
	if err := set(true); err != nil {
		in.record(f, false, err.Error())
		return
	}
	time.Sleep(f.Duration)
	in.record(f, true, errText(set(false)))
}

func (in *Injector) putProviderFaults(ctx context.Context, state providerFaults) error {
	state.Latency = "0s"
	in.mu.Lock()
	state.RefuseTo = slices.Clone(in.refused) // refused for good: every later setting keeps them
	in.mu.Unlock()
	ctx = context.WithoutCancel(ctx) // turning a fault off must not be cut short
	p := in.sys.Process("emailprovider")
	var err error
	for range 30 { // the provider may be down for a moment (killed, restarting)
		if err = harness.PutJSON(ctx, "http://"+p.HTTPAddr+"/admin/faults", state); err == nil {
			return nil
		}
		if !harness.Sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	return fmt.Errorf("set provider faults: %w", err)
}

// Heal ends every fault: toxics removed, links up, provider faults off, failpoints
// disarmed, and every process running. It runs after the load, before the quiet period.
func (in *Injector) Heal(ctx context.Context) error {
	in.wait()
	err := in.sys.Net.Heal()
	in.mu.Lock()
	in.provider = providerFaults{}
	in.mu.Unlock()
	if e := in.putProviderFaults(ctx, providerFaults{}); e != nil {
		err = e
	}
	for _, p := range in.sys.Procs {
		if p.ArmedFailpoints() != "" {
			p.Restart("", 5*time.Second)
		}
	}
	// The provider's faults live in its memory: a restart after the reset above would
	// not bring them back, and a provider that was down during the reset starts clean.
	for _, p := range in.sys.Procs {
		if e := p.WaitReady(ctx, time.Minute); e != nil && err == nil {
			err = e
		}
	}
	return err
}

func rabbitmqctl(ctx context.Context, cmd string) error {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", cmd).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %w: %s", cmd, err, out)
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
