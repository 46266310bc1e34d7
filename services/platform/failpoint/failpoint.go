// Package failpoint opens the failure windows that the rest of a system claims to
// survive: a named place in the code (Bookstore's "ordering/before-commit") where a test
// or the chaos run makes the process die as a power cut would, return an error, or stall.
// The system names its failpoints (Bookstore's are in services/contracts); they are
// configured once, from BOOKSTORE_FAILPOINTS:
//
//	BOOKSTORE_FAILPOINTS="ordering/before-commit=crash;relay/after-publish=p(0.05)*crash"
//
// Actions: crash (SIGKILL), error, delay(50ms), each optionally prefixed by p(0.05)*,
// and that by once* to fire only the first time the failpoint would fire:
// "inventory/before-commit=once*delay(8s)" holds one handler, not every one. Unset,
// Inject is one atomic load and a nil check.
package failpoint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvVar is the environment variable read by Configure.
const EnvVar = "BOOKSTORE_FAILPOINTS"

// ErrInjected is returned by Inject for the action "error".
var ErrInjected = errors.New("failpoint: injected error")

// Kind is what a failpoint does when it fires.
type Kind int

const (
	Crash Kind = iota + 1
	Error
	Delay
)

// Action is one configured failpoint.
type Action struct {
	Kind        Kind
	Delay       time.Duration
	Probability float64 // 1 unless p(...) was given
	Once        bool    // once*: it fires the first time only, until the next Configure
}

// Set maps failpoint names to their actions.
type Set map[string]Action

var active atomic.Pointer[armed]

// armed is the active set, with a flag per once* failpoint that has fired.
type armed struct {
	set   Set
	fired map[string]*atomic.Bool
}

// crash is replaced in tests of this package; everywhere else it is a real SIGKILL, so no
// deferred function, no rollback and no ack runs: exactly what a power cut leaves behind.
var crash = func() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not instantaneous; never return into the code after the failpoint
}

// Configure parses spec (the value of BOOKSTORE_FAILPOINTS) against the system's
// failpoint names and makes it the active set. An empty spec clears every failpoint.
func Configure(spec string, names []string) error {
	set, err := Parse(spec, names)
	if err != nil {
		return err
	}
	if len(set) == 0 {
		active.Store(nil)
		return nil
	}
	a := &armed{set: set, fired: map[string]*atomic.Bool{}}
	for name := range set {
		a.fired[name] = new(atomic.Bool)
	}
	active.Store(a)
	return nil
}

// Inject runs the failpoint called name, if it is configured. It returns ErrInjected for
// the action "error", ctx's error if ctx ends during a delay, and nil otherwise. A crash
// does not return.
func Inject(ctx context.Context, name string) error {
	on := active.Load()
	if on == nil {
		return nil
	}
	a, ok := on.set[name]
	if !ok {
		return nil
	}
	if a.Probability < 1 && rand.Float64() >= a.Probability {
		return nil
	}
	if a.Once && !on.fired[name].CompareAndSwap(false, true) {
		return nil
	}
	switch a.Kind {
	case Crash:
		crash()
	case Error:
		return fmt.Errorf("%s: %w", name, ErrInjected)
	case Delay:
		t := time.NewTimer(a.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Parse reads a failpoint specification. It rejects actions it does not know and names
// not in names, so a typo in a chaos run fails loudly instead of silently testing
// nothing.
func Parse(spec string, names []string) (Set, error) {
	set := Set{}
	for _, part := range strings.Split(spec, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, action, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want name=action", part)
		}
		name = strings.TrimSpace(name)
		if !slices.Contains(names, name) {
			return nil, fmt.Errorf("failpoint %q: unknown name (known: %s)", name, strings.Join(names, ", "))
		}
		a, err := parseAction(strings.TrimSpace(action))
		if err != nil {
			return nil, fmt.Errorf("failpoint %q: %w", name, err)
		}
		set[name] = a
	}
	return set, nil
}

// String writes the set as a specification that Parse reads back into the same set:
// the names in order, each action as BOOKSTORE_FAILPOINTS spells it.
func (s Set) String() string {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + s[name].String()
	}
	return strings.Join(parts, ";")
}

// String writes the action as BOOKSTORE_FAILPOINTS spells it: crash, error or
// delay(50ms), prefixed by p(0.05)* unless it always fires, and by once* before that
// when it fires once.
func (a Action) String() string {
	var s string
	switch a.Kind {
	case Crash:
		s = "crash"
	case Error:
		s = "error"
	case Delay:
		s = "delay(" + a.Delay.String() + ")"
	default:
		s = fmt.Sprintf("kind(%d)", int(a.Kind))
	}
	if a.Probability != 1 {
		s = "p(" + strconv.FormatFloat(a.Probability, 'g', -1, 64) + ")*" + s
	}
	if a.Once {
		s = "once*" + s
	}
	return s
}

func parseAction(s string) (Action, error) {
	a := Action{Probability: 1}
	s, a.Once = strings.CutPrefix(s, "once*")
	if rest, ok := strings.CutPrefix(s, "p("); ok {
		num, after, ok := strings.Cut(rest, ")*")
		if !ok {
			return a, fmt.Errorf("action %q: want p(0.05)*action", s)
		}
		p, err := strconv.ParseFloat(num, 64)
		if err != nil || !(p >= 0 && p <= 1) { // NaN is neither, and is refused too
			return a, fmt.Errorf("action %q: probability must be between 0 and 1", s)
		}
		a.Probability, s = p, after
	}
	switch {
	case s == "crash":
		a.Kind = Crash
	case s == "error":
		a.Kind = Error
	case strings.HasPrefix(s, "delay(") && strings.HasSuffix(s, ")"):
		d, err := time.ParseDuration(s[len("delay(") : len(s)-1])
		if err != nil || d < 0 {
			return a, fmt.Errorf("action %q: bad duration", s)
		}
		a.Kind, a.Delay = Delay, d
	default:
		return a, fmt.Errorf("action %q: want crash, error or delay(duration)", s)
	}
	return a, nil
}
