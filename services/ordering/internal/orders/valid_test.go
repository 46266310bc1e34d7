package orders

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
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

// POST /orders/{id}/cancel sent with no body at all (curl -X POST) is a cancel, as {} is;
// a body that is there is read as any other.
func TestACancelWithoutABodyIsACancel(t *testing.T) {
	t.Parallel()
	for body, ok := range map[string]bool{"": true, "{}": true, `{"reason":"x"}`: false, "null": false} {
		var req CancelOrderRequest
		r := httptest.NewRequest(http.MethodPost, "/orders/018f2b1e-0000-7000-8000-000000000001/cancel", strings.NewReader(body))
		if p := httpapi.DecodeValid(r, &req); (p == nil) != ok {
			t.Errorf("body %q: problem %+v, want taken %v", body, p, ok)
		}
	}
}
