package web

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
)

// signals records the signals a RelayFreezer sends instead of sending them.
type signals struct {
	mu   sync.Mutex
	sent []syscall.Signal
	cont chan struct{}
}

func (s *signals) send(_ int, sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, sig)
	if sig == syscall.SIGCONT {
		s.cont <- struct{}{}
	}
	return nil
}

func (s *signals) got() []syscall.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

func newTestFreezer(d time.Duration) (*RelayFreezer, *signals) {
	s := &signals{cont: make(chan struct{}, 4)}
	p := NewRelayFreezer(4242, d)
	p.signal = s.send
	p.check = func(int) error { return nil }
	return p, s
}

// One freeze at a time: SIGSTOP, a second freeze refused, SIGCONT when it ends, and then
// a new freeze may start.
func TestRelayFreezerStopsThenContinues(t *testing.T) {
	p, s := newTestFreezer(50 * time.Millisecond)
	until, err := p.Freeze()
	if err != nil || until.IsZero() || !p.Until().Equal(until) {
		t.Fatalf("Freeze = %v, %v; Until %v", until, err, p.Until())
	}
	if _, err := p.Freeze(); !errors.Is(err, errAlreadyFrozen) {
		t.Errorf("a second Freeze = %v, want errAlreadyFrozen", err)
	}
	select {
	case <-s.cont:
	case <-time.After(10 * time.Second):
		t.Fatal("no SIGCONT after the freeze")
	}
	if got := s.got(); !slices.Equal(got, []syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT}) {
		t.Errorf("signals %v, want SIGSTOP then SIGCONT", got)
	}
	if !p.Until().IsZero() {
		t.Errorf("Until %v after the freeze, want zero", p.Until())
	}
	if _, err := p.Freeze(); err != nil {
		t.Errorf("a freeze after the first ended: %v", err)
	}
	_ = p.Thaw()
}

// Thaw (the storefront's shutdown) continues a running freeze at once, and the freeze's
// own timer sends nothing more; without a freeze it sends nothing.
func TestRelayFreezerThawsAtShutdown(t *testing.T) {
	p, s := newTestFreezer(time.Hour)
	if err := p.Thaw(); err != nil || len(s.got()) != 0 {
		t.Fatalf("Thaw without a freeze: %v, signals %v", err, s.got())
	}
	if _, err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := p.Thaw(); err != nil {
		t.Fatal(err)
	}
	if got := s.got(); !slices.Equal(got, []syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT}) {
		t.Errorf("signals %v, want SIGSTOP then SIGCONT", got)
	}
}

// Only a process of the ordering binary run as `ordering relay` may be frozen (Linux's
// /proc); nothing is stopped otherwise.
func TestRelayFreezerRefusesAnotherProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		testenv.Unavailable(t, "/proc (the check is Linux only)", err)
	}
	// bash's exec -a names a process ordering: run with relay among its arguments it
	// passes, as `ordering relay` would; without, it is the API, and refused.
	start := func(script string) int {
		cmd := exec.Command("bash", "-c", script)
		if err := cmd.Start(); err != nil {
			testenv.Unavailable(t, "bash", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pid := cmd.Process.Pid
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); !strings.HasPrefix(string(b), "bash\x00-c\x00") {
				break // exec'd
			}
		}
		return pid
	}
	for _, tc := range []struct {
		what string
		pid  int
		want bool
	}{
		{"ordering relay", start(`exec -a ordering bash -c 'sleep 60; :' relay`), true},
		{"the ordering API", start(`exec -a /opt/bin/ordering bash -c 'sleep 60; :'`), false},
		{"another program with relay", start(`exec -a orderingx bash -c 'sleep 60; :' relay`), false},
		{"the test itself", os.Getpid(), false},
		{"no such process", 1 << 30, false},
	} {
		err := isOrderingRelay(tc.pid)
		if (err == nil) != tc.want || (err != nil && !errors.Is(err, errNotTheRelay)) {
			t.Errorf("%s: isOrderingRelay(%d) = %v, want ok %v", tc.what, tc.pid, err, tc.want)
		}
	}
}
