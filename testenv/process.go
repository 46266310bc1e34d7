package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A crash test must really lose the process: its memory, connections, unacked deliveries
// and open transactions, the way a power cut loses them. The failpoint action crash kills
// the process with SIGKILL, so these tests build the service's binary and run it as a
// child process (Build, StartProcess), then restart it without the failpoint and look at
// what the crash left behind.

// ExitTimeout bounds how long a test waits for a process to crash (WaitKilled) or to shut
// down (Stop).
const ExitTimeout = 60 * time.Second

var (
	builds sync.Map // package -> func() (string, error), each run at most once

	binMu  sync.Mutex
	binDir string // made by the first Build; Main removes it
)

// Build compiles the command in pkg (a directory such as "." or an import path) once per
// test binary, statically (CGO_ENABLED=0) as the Dockerfile does, and returns the path of
// the executable. Tests running in parallel share the one build; a failed build fails
// every test that asks for it. A package whose tests call Build uses Main as its TestMain,
// so the binaries are removed when the tests end.
//
// With RACE=1 in the environment (the race pass of .ci/run, `make test-race`) the binary
// is built with -race instead, so the processes a test starts are checked for data races
// as the test binary itself is; the race detector needs cgo, so CGO_ENABLED=1 then. A race
// in such a process is reported on its stderr, which the test prints when it fails, and
// makes the process exit with status 66 where it would have exited cleanly (see
// StartProcess).
func Build(t testing.TB, pkg string) string {
	t.Helper()
	once, _ := builds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) { return build(pkg) }))
	bin, err := once.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func build(pkg string) (string, error) {
	binMu.Lock()
	if binDir == "" {
		dir, err := os.MkdirTemp("", "bookstore-test-bin-")
		if err != nil {
			binMu.Unlock()
			return "", err
		}
		binDir = dir
	}
	root := binDir
	binMu.Unlock()

	name := path.Base(pkg)
	if pkg == "." {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		name = filepath.Base(wd)
	}
	dir, err := os.MkdirTemp(root, name+"-") // two packages may end in the same name
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build"}, BuildFlags()...), "-o", out, pkg)...)
	cmd.Env = append(os.Environ(), BuildEnv()...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// Race reports whether the suite runs under the race detector (RACE=1): binaries built
// for it are built with -race.
func Race() bool { return os.Getenv("RACE") == "1" }

// BuildFlags are the flags of `go build` for a binary a test runs: -race under RACE=1.
func BuildFlags() []string {
	if Race() {
		return []string{"-race"}
	}
	return nil
}

// BuildEnv is what `go build` of such a binary adds to the environment: CGO_ENABLED=0 as
// the Dockerfile builds, or CGO_ENABLED=1 under RACE=1, which the race detector needs.
func BuildEnv() []string {
	if Race() {
		return []string{"CGO_ENABLED=1"}
	}
	return []string{"CGO_ENABLED=0"}
}

// Main runs a package's tests and then removes the binaries Build made for them:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	binMu.Lock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	binMu.Unlock()
	os.Exit(code)
}

// Process is a service running as a real OS process.
type Process struct {
	Name string // the binary's name, for messages
	Base string // the service's base URL, http://127.x.y.z:port

	cmd    *exec.Cmd
	log    *logBuffer
	exited chan struct{} // closed once the process has ended and err is set
	err    error         // what cmd.Wait returned
}

// StartProcess runs the binary bin with args, its environment the test's own plus env, and
// returns once its /readyz answers 200. HTTP_ADDR is set to a free loopback port unless env
// names one (a test that restarts a service where another expects it passes the same
// address again). Whatever is left of the process is killed when the test ends, and its
// log is printed if the test failed.
func (s System) StartProcess(t testing.TB, bin string, args []string, env map[string]string) *Process {
	t.Helper()
	addr := env["HTTP_ADDR"]
	if addr == "" {
		addr = FreeAddr(t)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HTTP_ADDR="+addr, "DATABASE_MAX_CONNS="+strconv.Itoa(PoolSize))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if producer, ok := oneUserProducer(env); ok {
		cmd.Env = append(cmd.Env, "CONSUMER_PRODUCER="+producer)
	}
	p := &Process{Name: filepath.Base(bin), Base: "http://" + addr, cmd: cmd, log: &logBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if RaceReported(p.Log()) {
			t.Errorf("%s: the race detector found a data race", p.Name)
		}
		if t.Failed() {
			t.Logf("%s (%v) log:\n%s", p.Name, p.err, p.Log())
		}
	})
	// Every exchange with the service is checked against its HTTP contract.
	s.watch(t, p.Base, p.Name)
	WaitReady(t, p.Base, p.exited)
	return p
}

// RaceReported reports whether a process's output holds a report of the race detector.
// A process killed at the end of a test never gets to exit with the detector's status,
// so its log is where a race shows.
func RaceReported(log string) bool { return strings.Contains(log, "WARNING: DATA RACE") }

// Pid is the process's id, for a test that signals it (or has another process do so).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Log returns what the process has written to stdout and stderr so far.
func (p *Process) Log() string { return p.log.String() }

// WaitKilled waits for the process to die of SIGKILL, as the crash failpoint does, and
// fails the test if it ends otherwise or not within ExitTimeout.
func (p *Process) WaitKilled(t testing.TB) {
	t.Helper()
	select {
	case <-p.exited:
		if !KilledBySIGKILL(p.err) {
			t.Fatalf("%s ended with %v, want killed by SIGKILL\n%s", p.Name, p.err, p.Log())
		}
	case <-time.After(ExitTimeout):
		t.Fatalf("%s did not crash\n%s", p.Name, p.Log())
	}
}

// KilledBySIGKILL reports whether err, what exec.Cmd.Wait returned, says the process
// died of SIGKILL: killed by a test or a harness, or by its own crash failpoint.
func KilledBySIGKILL(err error) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	status, ok := exit.Sys().(syscall.WaitStatus)
	return ok && status.Signaled() && status.Signal() == syscall.SIGKILL
}

// Stop ends the process with SIGTERM and waits for it: a graceful shutdown, which fails
// the test unless the process exits cleanly within ExitTimeout.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("%s did not stop cleanly: %v\n%s", p.Name, p.err, p.Log())
		}
	case <-time.After(ExitTimeout):
		t.Fatalf("%s did not stop\n%s", p.Name, p.Log())
	}
}

// logBuffer collects a process's output while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
