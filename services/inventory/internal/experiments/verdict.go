package experiments

import "fmt"

// adaCopies is how many copies of Dune Ada orders in every experiment: what a correct
// design reserves for her order, however often it is delivered.
const adaCopies = 2

// header is the first line RunAll prints: the pattern, where it is explained, and what a
// correct design gives in every experiment below it.
var header = fmt.Sprintf("== Idempotent consumer (docs/idempotent-consumer.md): Ada orders %d copies of Dune; "+
	"want them reserved once, whatever the broker delivers and the process survives", adaCopies)

// wanted is a measured value beside the value a correct design gives: "4 (want 2)".
func wanted[T comparable](got, want T) string {
	return fmt.Sprintf("%v (want %v)", got, want)
}

// verdict ends a line: ✓ when every value measured is the one a correct design gives,
// otherwise ✗ and harm, what the difference does to the order.
func verdict(ok bool, harm string) string {
	if ok {
		return "✓"
	}
	return "✗ " + harm
}

// reservedHarm says what a reserved count of got does where want was right: nothing
// reserved is the order lost, twice want is the order applied twice.
func reservedHarm(got, want int) string {
	switch {
	case got == 0 && want > 0:
		return "lost"
	case got == 2*want:
		return "applied twice"
	case got > want:
		return fmt.Sprintf("%d copies too many", got-want)
	}
	return fmt.Sprintf("%d copies short", want-got)
}

// reservedVerdict is verdict for a line whose measure is Dune's reserved count.
func reservedVerdict(got, want int) string {
	return verdict(got == want, reservedHarm(got, want))
}
