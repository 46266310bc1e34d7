package failpoint

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// FuzzSpecNamesOnlyKnownFailpointsAndRoundTrips: whatever BOOKSTORE_FAILPOINTS holds,
// Parse does not panic; it refuses the spec with an error, or returns a set that names
// only known failpoints, each with a known action, a probability in [0, 1] and a delay
// that is not negative, and whose String form parses back into the same set. Configure
// agrees with Parse.
func FuzzSpecNamesOnlyKnownFailpointsAndRoundTrips(f *testing.F) {
	for _, seed := range []string{
		"",
		";;",
		"shop/before-commit=crash",
		"shop/before-commit=crash; relay/after-publish=p(0.25)*error;stock/after-commit=delay(50ms)",
		"mail/after-send=p(1)*delay(1h2m3.5s)",
		"mail/after-send=once*p(0.1)*delay(8s);shop/before-commit=once*crash",
		"shop/before-commit=crash;shop/before-commit=error", // a name twice: the last wins
		"shop/before-commit=p(NaN)*crash",
		"shop/before-commit=p(Inf)*crash",
		"shop/before-commit=p(-0)*crash",
		"shop/before-commit=p(1e-400)*crash",
		"shop/before-commit=p(0x1p-2)*crash",
		"shop/before-commit=p(0.5)*p(0.5)*crash",
		"shop/before-commit=delay(-1s)",
		"shop/before-commit=delay(99999999999999999999h)",
		"shop/before-commit=delay()",
		"Shop/Before-Commit=crash",
		"shop/before-commit=CRASH",
		"shop/before-commit\x00=crash",
		"shop/before-commit=crash\xff",
		"=crash",
		"shop/before-commit==crash",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		set, err := Parse(spec, names)
		if err != nil {
			if set != nil {
				t.Fatalf("%q: an error and a set %v", spec, set)
			}
			if cerr := Configure(spec, names); cerr == nil {
				t.Fatalf("%q: Parse refused it (%v), Configure took it", spec, err)
			}
			return
		}
		for name, a := range set {
			switch {
			case !slices.Contains(names, name):
				t.Fatalf("%q: accepted the unknown failpoint %q", spec, name)
			case a.Kind != Crash && a.Kind != Error && a.Kind != Delay:
				t.Fatalf("%q: %s has kind %d", spec, name, a.Kind)
			case math.IsNaN(a.Probability) || a.Probability < 0 || a.Probability > 1:
				t.Fatalf("%q: %s fires with probability %v", spec, name, a.Probability)
			case a.Delay < 0 || (a.Kind != Delay && a.Delay != 0):
				t.Fatalf("%q: %s delays %v", spec, name, a.Delay)
			}
			if !strings.Contains(spec, name) {
				t.Fatalf("%q: %s is not in the spec", spec, name)
			}
		}
		again, err := Parse(set.String(), names)
		if err != nil {
			t.Fatalf("%q: its String form %q does not parse: %v", spec, set.String(), err)
		}
		if len(again) != len(set) {
			t.Fatalf("%q: round trip through %q gave %v, want %v", spec, set.String(), again, set)
		}
		for name, a := range set {
			if again[name] != a {
				t.Fatalf("%q: round trip through %q gave %s=%+v, want %+v", spec, set.String(), name, again[name], a)
			}
		}
		if err := Configure(spec, names); err != nil {
			t.Fatalf("%q: Parse took it, Configure refused it: %v", spec, err)
		}
		_ = Configure("", names)
	})
}
