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

// RelayPause stops one `ordering relay` process for a while with SIGSTOP and continues
// it with SIGCONT: the break-it panel's "pause the relay". It drives a mechanism that
// exists already (process signals, under `make run`, which runs the relay apart from
// ordering's API when demos are on); the relay holds its claims and connections while
// stopped and carries on where it was. Only one pause runs at a time, and Resume (at the
// storefront's shutdown) never leaves the relay stopped, unless the storefront itself is
// killed with SIGKILL while a pause runs.
type RelayPause struct {
	pid int
	// For is how long one pause lasts.
	For time.Duration

	signal func(pid int, sig syscall.Signal) error // syscall.Kill; a test's stand-in
	check  func(pid int) error                     // isOrderingRelay

	mu    sync.Mutex
	until time.Time   // zero: not paused
	timer *time.Timer // continues the relay at until
}

// NewRelayPause returns the pause of the `ordering relay` process pid, for d at a time.
func NewRelayPause(pid int, d time.Duration) *RelayPause {
	return &RelayPause{pid: pid, For: d, signal: syscall.Kill, check: isOrderingRelay}
}

var (
	errAlreadyPaused = errors.New("the relay is paused already")
	errNotTheRelay   = errors.New("not an ordering relay")
)

// Pause stops the relay now and continues it after For; it returns when the relay will
// continue. It refuses while a pause runs (errAlreadyPaused) and a pid that is not a
// process of `ordering relay` (errNotTheRelay).
func (p *RelayPause) Pause() (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.until.IsZero() {
		return p.until, errAlreadyPaused
	}
	if err := p.check(p.pid); err != nil {
		return time.Time{}, err
	}
	if err := p.signal(p.pid, syscall.SIGSTOP); err != nil {
		return time.Time{}, fmt.Errorf("SIGSTOP to process %d: %w", p.pid, err)
	}
	until := time.Now().Add(p.For)
	p.until = until
	p.timer = time.AfterFunc(p.For, func() { _ = p.resume(until) })
	return until, nil
}

// Resume continues a paused relay at once; without a pause it does nothing.
func (p *RelayPause) Resume() error { return p.resume(time.Time{}) }

// resume ends the pause that ends at until (any pause when until is zero): a timer that
// fires late does not end a pause after its own.
func (p *RelayPause) resume(until time.Time) error {
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

// Until says when a running pause ends; zero when none runs.
func (p *RelayPause) Until() time.Time {
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
