package web

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// RelayFreezer freezes one `ordering relay` process for a while with SIGSTOP and thaws
// it with SIGCONT: the break-it panel's "pause the relay". The relay keeps its claims and
// connections while frozen and carries on where it was. One freeze runs at a time, and
// Thaw (at the storefront's shutdown) never leaves the relay frozen, unless the
// storefront itself is killed with SIGKILL during a freeze.
type RelayFreezer struct {
	pid int
	// For is how long one freeze lasts.
	For time.Duration

	signal func(pid int, sig syscall.Signal) error // syscall.Kill; a test's stand-in
	check  func(pid int) error                     // isOrderingRelay

	mu    sync.Mutex
	until time.Time   // zero: not frozen
	timer *time.Timer // thaws the relay at until
}

// NewRelayFreezer returns the freezer of the `ordering relay` process pid, for d at a time.
func NewRelayFreezer(pid int, d time.Duration) *RelayFreezer {
	return &RelayFreezer{pid: pid, For: d, signal: syscall.Kill, check: isOrderingRelay}
}

var (
	errAlreadyFrozen = errors.New("the relay is paused already")
	errNotTheRelay   = errors.New("not an ordering relay")
)

// Freeze stops the relay now and thaws it after For; it returns when the relay will
// continue. It refuses while a freeze runs (errAlreadyFrozen) and a pid that is not a
// process of `ordering relay` (errNotTheRelay).
func (p *RelayFreezer) Freeze() (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.until.IsZero() {
		return p.until, errAlreadyFrozen
	}
	if err := p.check(p.pid); err != nil {
		return time.Time{}, err
	}
	if err := p.signal(p.pid, syscall.SIGSTOP); err != nil {
		return time.Time{}, fmt.Errorf("SIGSTOP to process %d: %w", p.pid, err)
	}
	until := time.Now().Add(p.For)
	p.until = until
	p.timer = time.AfterFunc(p.For, func() { _ = p.thaw(until) })
	return until, nil
}

// Thaw continues a frozen relay at once; without a freeze it does nothing.
func (p *RelayFreezer) Thaw() error { return p.thaw(time.Time{}) }

// thaw ends the freeze that ends at until (any freeze when until is zero): a timer that
// fires late does not end a freeze after its own.
func (p *RelayFreezer) thaw(until time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.until.IsZero() || (!until.IsZero() && !p.until.Equal(until)) {
		return nil
	}
	p.timer.Stop()
	p.until = time.Time{}
	if err := p.signal(p.pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT to process %d: %w", p.pid, err)
	}
	return nil
}

// Until says when a running freeze ends; zero when none runs.
func (p *RelayFreezer) Until() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.until
}

// isOrderingRelay checks through /proc (Linux only) that pid is a process of the ordering
// binary run as `ordering relay`, so the panel never stops the API or another program
// that took over a pid a relay left. Where /proc is missing it refuses.
func isOrderingRelay(pid int) error {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return fmt.Errorf("%w: cannot read process %d's command line (the check reads /proc, on Linux only): %v", errNotTheRelay, pid, err)
	}
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	var argv []string
	for _, a := range args {
		argv = append(argv, string(a))
	}
	if len(argv) < 2 || filepath.Base(argv[0]) != "ordering" || !slices.Contains(argv[1:], "relay") {
		return fmt.Errorf("%w: process %d is %q, want ordering relay", errNotTheRelay, pid, argv)
	}
	return nil
}
