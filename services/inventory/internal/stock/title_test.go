package stock_test

import (
	"testing"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
)

// A title follows the text rule an event's free text follows (contracts.TextProblem): no
// control character (ESC, BEL, NUL, a line break) and no invisible formatting character
// (a bidi override such as U+202E, a zero-width space), which the storefront's page would
// otherwise carry as they are; any other character of any script is a title.
func TestATitleFollowsTheTextRuleOfEvents(t *testing.T) {
	t.Parallel()
	onHand := 1
	for _, title := range []string{"evil\u202Egnp.exe", "a\x1b[31mred", "bell\a", "line\nbreak", "zero\u200bwidth", "nul\x00"} {
		if p := (stock.PutBookRequest{Title: &title, OnHand: &onHand}).Valid(); p["title"] == "" {
			t.Errorf("title %q was taken", title)
		}
	}
	for _, title := range []string{"Dune", "Война и мир", "百年孤独", "L'Étranger", "Émile, ou De l'éducation 📚"} {
		if p := (stock.PutBookRequest{Title: &title, OnHand: &onHand}).Valid(); len(p) != 0 {
			t.Errorf("title %q was refused: %v", title, p)
		}
	}
}
