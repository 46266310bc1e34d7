package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
)

// Process is one service process under supervision: started, restarted whenever it dies
// (killed by the harness, crashed at a failpoint, or failed to start because a link was
// down), and stopped at the end. Its output goes to one log file across restarts.
type Process struct {
	Name     string
	Service  string // ordering | inventory | notification | emailprovider
	HTTPAddr string

	bin  string
	Args []string
	Env  []string
	log  *os.File

	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{} // closed when the current cmd has exited
	failpoints  string        // BOOKSTORE_FAILPOINTS for the next start
	expectExit  bool          // the harness sent the signal that ends the current cmd
	restartIn   time.Duration // how long to stay down after the current cmd ends
	stopping    bool
	stats       ProcessStats
	onFailpoint func(p *Process, spec string) // a failpoint crash fired
	holds       int                           // faults that keep it from starting again (frozen or held down)
	frozen      int                           // faults that keep it stopped with SIGSTOP
	released    chan struct{}                 // closed when holds drops to 0
	startedAt   time.Time                     // when the current cmd started
}

// ProcessStats counts what happened to a process during the run.
type ProcessStats struct {
	Name             string `json:"name"`
	Starts           int    `json:"starts"`
	Kills            int    `json:"kills"`             // SIGKILLs sent by the harness
	FailpointCrashes int    `json:"failpoint_crashes"` // deaths by its own failpoint
	Restarts         int    `json:"restarts"`          // graceful restarts to arm or disarm failpoints
	OtherExits       int    `json:"other_exits"`       // e.g. start-up failed while a link was down
}

// start runs the supervisor until Stop. It returns once the first process has started.
func (p *Process) start(ctx context.Context) error {
	p.mu.Lock()
	p.stats.Name = p.Name
	p.mu.Unlock()
	started := make(chan error, 1)
	go p.supervise(ctx, started)
	return <-started
}

func (p *Process) supervise(ctx context.Context, started chan<- error) {
	first := true
	for {
		p.mu.Lock()
		for p.holds > 0 && !p.stopping {
			// Frozen or held down by a fault: no new process until it lets go.
			released := p.released
			p.mu.Unlock()
			select {
			case <-released:
			case <-ctx.Done():
				return
			}
			p.mu.Lock()
		}
		if p.stopping {
			p.mu.Unlock()
			return
		}
		cmd := exec.Command(p.bin, p.Args...)
		cmd.Env = append(append([]string(nil), p.Env...), "BOOKSTORE_FAILPOINTS="+p.failpoints)
		cmd.Stdout, cmd.Stderr = p.log, p.log
		// Its own process group keeps a Ctrl-C at the terminal from reaching it before the
		// harness stops it in order; Pdeathsig takes it down if the harness itself dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		fmt.Fprintf(p.log, "=== chaos %s: start #%d BOOKSTORE_FAILPOINTS=%q\n", time.Now().Format(time.RFC3339Nano), p.stats.Starts+1, p.failpoints)
		err := cmd.Start()
		if err != nil {
			p.mu.Unlock()
			if first {
				started <- fmt.Errorf("start %s: %w", p.Name, err)
				return
			}
			fmt.Fprintf(p.log, "=== chaos: start failed: %v\n", err)
			if !Sleep(ctx, time.Second) {
				return
			}
			continue
		}
		p.stats.Starts++
		p.startedAt = time.Now()
		p.cmd = cmd
		p.done = make(chan struct{})
		done := p.done
		p.mu.Unlock()
		if first {
			started <- nil
			first = false
		}

		err = cmd.Wait()
		p.mu.Lock()
		fmt.Fprintf(p.log, "=== chaos %s: exited: %v (expected=%v)\n", time.Now().Format(time.RFC3339Nano), err, p.expectExit)
		close(done)
		expected := p.expectExit
		p.expectExit = false
		delay := p.restartIn
		p.restartIn = 0
		var fired string
		switch {
		case expected:
		case testenv.KilledBySIGKILL(err) && p.failpoints != "":
			// Nobody sent this SIGKILL: the process crashed itself at a failpoint. It
			// comes back without it, as a machine comes back from a power cut.
			p.stats.FailpointCrashes++
			fired, p.failpoints = p.failpoints, ""
		default:
			p.stats.OtherExits++
			delay = max(delay, 500*time.Millisecond) // e.g. a link down at start-up: do not spin
		}
		stopping := p.stopping
		p.mu.Unlock()
		if fired != "" && p.onFailpoint != nil {
			p.onFailpoint(p, fired)
		}
		if stopping {
			return
		}
		if !Sleep(ctx, max(delay, 50*time.Millisecond)) {
			return
		}
	}
}

// exited reports whether the current cmd has ended; the caller holds p.mu. Not
// cmd.ProcessState: cmd.Wait sets that in the supervisor without the lock (the race pass
// caught restart reading it), while done is made and closed under the lock.
func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL, as a power cut would, and lets the supervisor restart the process
// after downFor.
func (p *Process) Kill(downFor time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited() || p.expectExit || p.stopping {
		return false // already down or on its way down
	}
	p.expectExit = true
	p.restartIn = downFor
	p.stats.Kills++
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	return true
}

// Restart stops the process gracefully (SIGTERM, SIGKILL after grace) and starts it
// again with the given failpoints: how a failpoint is armed and disarmed.
func (p *Process) Restart(failpoints string, grace time.Duration) {
	p.mu.Lock()
	p.failpoints = failpoints
	if p.cmd == nil || p.exited() || p.expectExit || p.stopping {
		p.mu.Unlock() // down already: the next start picks the failpoints up
		return
	}
	p.expectExit = true
	p.stats.Restarts++
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	terminate(cmd, done, grace)
}

// Freeze stops the process with SIGSTOP where it stands, as a long pause would (its
// connections stay open, its transactions and claims stay held), and keeps it from being
// started again if a kill ends it meanwhile, until thaw. It reports whether a live process
// was frozen.
func (p *Process) Freeze() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold()
	p.frozen++
	if p.cmd == nil || p.exited() || p.stopping {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	return true
}

// Thaw undoes a freeze: SIGCONT, and the supervisor may start it again.
func (p *Process) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen--
	if p.frozen == 0 && p.cmd != nil && !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.unhold()
}

// HoldDown stops the process gracefully (SIGTERM, SIGKILL after grace) and keeps it down
// until release: a service that is not running yet.
func (p *Process) HoldDown(grace time.Duration) {
	p.mu.Lock()
	p.hold()
	if p.cmd == nil || p.exited() || p.expectExit || p.stopping {
		p.mu.Unlock()
		return
	}
	p.expectExit = true
	p.stats.Restarts++
	cmd, done := p.cmd, p.done
	if p.frozen > 0 {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot act on SIGTERM
	}
	p.mu.Unlock()
	terminate(cmd, done, grace)
}

// Release lets a process held down start again.
func (p *Process) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unhold()
}

// hold and unhold count the faults that keep the process from starting; the caller
// holds p.mu.
func (p *Process) hold() {
	if p.holds == 0 {
		p.released = make(chan struct{})
	}
	p.holds++
}

func (p *Process) unhold() {
	p.holds--
	if p.holds == 0 {
		close(p.released)
	}
}

// upFor returns how long the current process has been running, 0 when it is down, on its
// way down or held by a heavy fault.
func (p *Process) upFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited() || p.expectExit || p.stopping || p.holds > 0 {
		return 0
	}
	return time.Since(p.startedAt)
}

// Pid returns the process id of the current process, 0 while it is down.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exited() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Held reports whether a heavy fault keeps the process frozen or down.
func (p *Process) Held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holds > 0
}

// ArmedFailpoints returns the failpoints the process runs with now.
func (p *Process) ArmedFailpoints() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failpoints
}

// Disarm clears the failpoints of the process's next start, leaving the running process
// as it is: a once* failpoint that has fired does nothing more, and a restart (a kill
// fault's) must not arm it again.
func (p *Process) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failpoints = ""
}

// LogSize is how much the process has logged so far, for LogSince.
func (p *Process) LogSize() int64 {
	fi, err := os.Stat(p.log.Name())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// LogSince returns the lines the process has logged after the first off bytes of its log
// (LogSize), and the size they end at.
func (p *Process) LogSince(off int64) ([]string, int64) {
	b, err := os.ReadFile(p.log.Name())
	if err != nil || int64(len(b)) <= off {
		return nil, off
	}
	rest := b[off:]
	end := bytes.LastIndexByte(rest, '\n') + 1 // a line still being written waits for the next call
	if end == 0 {
		return nil, off
	}
	return strings.Split(strings.TrimRight(string(rest[:end]), "\n"), "\n"), off + int64(end)
}

// stop ends supervision and the process: SIGTERM, then SIGKILL after grace.
func (p *Process) stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	p.expectExit = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process acts on SIGTERM only once continued
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// counters returns a copy of the process's counters.
func (p *Process) counters() ProcessStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// WaitReady waits until the process answers /readyz with 200 (testenv.PollReady, the
// wait every test uses). On a timeout the error ends with the tail of the process's log,
// which says why: a port it could not listen on, a link down at start-up, a crash loop.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := testenv.PollReady(ctx, "http://"+p.HTTPAddr, nil); err != nil {
		return fmt.Errorf("%s not ready at http://%s/readyz after %v: %w (see logs/%s.log, which ends:\n%s)",
			p.Name, p.HTTPAddr, timeout, err, p.Name, p.logTail(20))
	}
	return nil
}

// logTail returns the last n lines of the process's log.
func (p *Process) logTail(n int) string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freeAddr returns a loopback address with a port nobody listens on right now, far from
// the 8081-8084 a developer's system uses. It is on a random host of 127.0.0.0/8, as the
// tests' addresses are: a process killed by a fault gives its port up until its restart,
// and on 127.0.0.1 any other listener or outgoing connection on the machine (the smoke
// tests run beside every other package's tests) could take it meanwhile, leaving the
// restarted process unable to listen and never ready.
func freeAddr() (string, error) { return testenv.LoopbackAddr() }

// Sleep waits d, or until ctx ends; it reports whether the whole of d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// terminate stops cmd gracefully: SIGTERM, then SIGKILL if it has not exited (done
// closed) within grace.
func terminate(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Ready reports whether the process answers /readyz with 200 within timeout.
func (p *Process) Ready(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return status(ctx, "http://"+p.HTTPAddr+"/readyz") == http.StatusOK
}
