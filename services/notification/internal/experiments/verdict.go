package experiments

import "fmt"

// header is the first line RunAll prints: the pattern, where it is explained, and what a
// correct design gives in every experiment below it.
const header = "== Exactly-once email (docs/exactly-once-email.md): want one email per order, whatever the process survives"

// wanted is a measured value beside the value a correct design gives: "0 (want 1)".
func wanted[T comparable](got, want T) string {
	return fmt.Sprintf("%v (want %v)", got, want)
}

// verdict ends a line: ✓ when every value measured is the one a correct design gives,
// otherwise ✗ and harm, what the difference does to the system.
func verdict(ok bool, harm string) string {
	if ok {
		return "✓"
	}
	return "✗ " + harm
}
