package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

type bookRequest struct {
	Title  string `json:"title"`
	OnHand int    `json:"on_hand"`
}

func (b bookRequest) Valid() map[string]string {
	if b.OnHand < 0 {
		return map[string]string{"on_hand": "must not be negative"}
	}
	return nil
}

func TestDecodeValidNamesTheFieldItRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body   string
		status int // 0: no problem
		field  string
	}{
		{`{"title": "Dune", "on_hand": 3}`, 0, ""},
		{`{"title": "Dune", "on_hand": -1}`, http.StatusUnprocessableEntity, "on_hand"},
		{`{"title": "Dune", "isbn": "x"}`, http.StatusBadRequest, "isbn"},
		{`{"title": `, http.StatusBadRequest, ""},
	} {
		var req bookRequest
		p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPut, "/books/1", strings.NewReader(c.body)), &req)
		switch {
		case c.status == 0 && (p != nil || req.Title != "Dune" || req.OnHand != 3):
			t.Errorf("%s: %+v %+v, want it decoded without a problem", c.body, req, p)
		case c.status != 0 && (p == nil || p.Status != c.status):
			t.Errorf("%s: problem %+v, want status %d", c.body, p, c.status)
		case c.field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != c.field):
			t.Errorf("%s: problem %+v, want it to name %s", c.body, p, c.field)
		}
	}
}
