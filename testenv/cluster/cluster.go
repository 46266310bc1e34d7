// Package cluster starts the production topology on one machine, for tests and the chaos
// harness: a RabbitMQ cluster of several nodes whose quorum queues have a member on each,
// and Postgres primaries with one synchronous streaming standby, each on loopback ports of
// its own, from this machine's own binaries (RabbitMQ 3.10, Postgres 15). It kills, stops,
// restarts and fails over their nodes the way a lost machine or CloudNativePG would.
//
// Everything a cluster starts lives under one root directory (Root, unless the caller
// names another): a directory per cluster named after the process that owns it. Close
// stops the cluster's processes and removes its directory; a harness that is itself
// killed never gets to call Close, so every Start first sweeps the root for clusters whose
// owner is dead, kills what is left of their processes and removes their directories.
// Nothing is ever left running for longer than the next run takes to start.
//
// The machine's own servers (Postgres on 5432, RabbitMQ on 5672) are never touched: the
// nodes here listen on ports of their own and keep their data, logs and Erlang cookie in
// their own directories.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Root is the directory under which clusters live when the caller names none: one per
// machine, so that any run sweeps what any earlier killed run left behind.
func Root() string { return filepath.Join(os.TempDir(), "bookstore-cluster") }

// seq numbers the clusters of this process.
var seq atomic.Int64

// clusterDir sweeps root and creates the directory of a new cluster in it, named
// <pid>-<start time>-<seq>-<kind>: the owner's pid and start time tell a later sweep
// whether the owner still runs (a pid alone may have been reused).
func clusterDir(root, kind string) (string, error) {
	if root == "" {
		root = Root()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	// Postgres runs as the postgres user and must reach its directories through root.
	if err := os.Chmod(root, 0o755); err != nil {
		return "", err
	}
	Sweep(root)
	start, err := startTime(os.Getpid())
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, fmt.Sprintf("%d-%d-%d-%s", os.Getpid(), start, seq.Add(1), kind))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// Sweep kills the processes of every cluster under root whose owner has died, and removes
// their directories. Clusters of running owners, this process's own included, are left
// alone. Every Start calls it; it is exported for a harness that wants a clean machine
// before it measures anything.
func Sweep(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var swept []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		parts := strings.SplitN(e.Name(), "-", 3)
		if len(parts) < 3 {
			continue
		}
		pid, err1 := strconv.Atoi(parts[0])
		start, err2 := strconv.ParseUint(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if now, err := startTime(pid); err == nil && now == start {
			continue // its owner runs
		}
		dir := filepath.Join(root, e.Name())
		killMarked(dir)
		_ = os.RemoveAll(dir)
		swept = append(swept, dir)
	}
	return swept
}

// startTime is the start time of process pid in clock ticks since boot (field 22 of
// /proc/pid/stat), which together with the pid names one process for good.
func startTime(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// procStat returns the fields of /proc/pid/stat after the command name, so that f[0] is
// field 3 (the state) and f[2] field 5 (the process group).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return f, nil
}

// killMarked kills with SIGKILL every process whose command line or environment names
// dir, until none is left: the nodes of a cluster and all their children carry the
// cluster's directory in one or the other (Postgres's backends in their process titles,
// through cluster_name; RabbitMQ's helpers in the environment they inherit).
func killMarked(dir string) {
	for range 50 {
		pids := marked(dir)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// marked lists the live processes (not zombies) that name dir: its base name between
// slashes, as in the directory's path or a Postgres cluster_name (which is too short for a
// whole path).
func marked(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	mark := []byte("/" + filepath.Base(dir) + "/")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if f, err := procStat(pid); err != nil || f[0] == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		environ, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if bytes.Contains(cmdline, mark) || bytes.Contains(environ, mark) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// markEnv is the environment variable that marks every process of a cluster (see
// killMarked).
const markEnv = "BOOKSTORE_CLUSTER_DIR"

// proc is one node's OS process, the leader of a process group of its own, with its
// output appended to a log file.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process has ended and err is set
	err  error
}

// startProc starts name with args in a process group of its own, as the user cred (nil:
// this process's), its output appended to logPath.
func startProc(name string, args, env []string, dir, logPath string, cred *syscall.Credential) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the process's whole group: the node and every helper it started.
func (p *proc) signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process, its group and all its descendants with SIGKILL at once, as a
// lost machine loses them, and waits until none is left. Postgres puts every backend in a
// session of its own, so its group is the postmaster alone: the descendants are found by
// their parent. The process is stopped first, so that it forks nothing new meanwhile.
func (p *proc) kill() error {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	pids := descendants(pid)
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	for _, d := range pids {
		_ = syscall.Kill(d, syscall.SIGKILL)
	}
	<-p.done
	return waitGone(append(pids, pid), 10*time.Second)
}

// signalTree sends sig to the process, its group and all its descendants.
func (p *proc) signalTree(sig syscall.Signal) error {
	pids := descendants(p.cmd.Process.Pid)
	if err := p.signal(sig); err != nil {
		return err
	}
	for _, d := range pids {
		_ = syscall.Kill(d, sig)
	}
	return nil
}

// stop ends the group with sig and waits up to timeout for it, then kills it.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) error {
	pids := descendants(p.cmd.Process.Pid)
	if err := p.signal(sig); err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.kill()
		return fmt.Errorf("%s did not stop within %v after %v; killed it", filepath.Base(p.cmd.Path), timeout, sig)
	}
	return waitGone(pids, 10*time.Second)
}

// descendants lists pid's children, their children and so on.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStat(child)
		if err != nil {
			continue
		}
		parent, _ := strconv.Atoi(f[1])
		children[parent] = append(children[parent], child)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// waitGone waits until none of pids is alive (a zombie whose parent has not reaped it
// yet counts as gone), killing stragglers.
func waitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var alive []int
		for _, pid := range pids {
			if f, err := procStat(pid); err == nil && f[0] != "Z" {
				alive = append(alive, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive after %v", alive, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tail returns the last n bytes of a log file, for an error message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log %s: %v)", path, err)
	}
	if len(b) > n {
		b = append([]byte("…"), b[len(b)-n:]...)
	}
	return string(b)
}

// poll calls cond every interval until it returns nil, and returns its last error
// wrapped with what once ctx ends or done is closed.
func poll(ctx context.Context, what string, done <-chan struct{}, cond func(ctx context.Context) error) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = cond(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), last)
		case <-done:
			return fmt.Errorf("%s: the process exited (last: %v)", what, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// parallel runs f for 0..n-1 at once and joins their errors.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
