package orders

import (
	"net/http"
	"strings"
	"testing"
)

// Validation stops at the first limit it meets: an order of 21,000 empty lines (63 KB,
// under the body limit) breaks the limit on lines, and that is the one error it gets,
// not 42,000 (a book id and a quantity missing on each line).
func TestTooManyLinesIsOneError(t *testing.T) {
	t.Parallel()
	body := `{"customer_email":"ada@example.com","lines":[` + strings.Repeat(`{},`, 20999) + `{}]}`
	_, p := decodePlaceOrder(body)
	if p == nil || p.Status != http.StatusUnprocessableEntity {
		t.Fatalf("%d-byte body: %+v, want a 422", len(body), p)
	}
	if len(p.Errors) != 1 || p.Errors[0].Field != "lines" {
		t.Errorf("%d errors, the first %+v; want one, naming lines", len(p.Errors), p.Errors[:min(len(p.Errors), 1)])
	}
}
