package contracts_test

import (
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/contracts"
)

func TestAnAddressMustNameAMailboxOnTheInternet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		address string
		ok      bool
	}{
		{"ada@example.com", true},
		{"a@b.c", true},
		{"ada.lovelace+books@mail.example.co.uk", true},
		{"o'brien@example.ie", true},
		{"ada@xn--bcher-kva.example", true},
		{"ada@bücher.example", true},
		{strings.Repeat("a", 64) + "@example.com", true},
		{"ada@" + strings.Repeat("a", 63) + ".example", true},

		{"", false},
		{"ada", false},
		{"ada@", false},
		{"@example.com", false},
		{"Ada <ada@example.com>", false},
		{"ada@example.com (Ada)", false},
		{"a@localhost", false},
		{"a@[127.0.0.1]", false},
		{"a@[IPv6:::1]", false},
		{"a@127.0.0.1", false},
		{"a@example.123", false},
		{"a@-example.com", false},
		{"a@example-.com", false},
		{"a@example..com", false},
		{"a@example.com.", false},
		{"a@exa_mple.com", false},
		{"a@" + strings.Repeat("a", 64) + ".example", false},
		{strings.Repeat("a", 65) + "@example.com", false},
		{strings.Repeat("a", 64) + "@" + strings.Repeat("b", 185) + ".com", false}, // 255 characters
		{"ada\u202e@example.com", false},                                           // right-to-left override
		{"ada@exa\u2066mple.com", false},                                           // left-to-right isolate
		{"ada\u200b@example.com", false},                                           // zero-width space
		{"ada@example.com\u200e", false},                                           // left-to-right mark
		{"ada\x00@example.com", false},
		{"ada\x7f@example.com", false},
		{"ada@exam\xffple.com", false},
	} {
		problem := contracts.AddressProblem(c.address)
		if (problem == "") != c.ok {
			t.Errorf("%q: problem %q, want accepted %v", c.address, problem, c.ok)
		}
	}
}
