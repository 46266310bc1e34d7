package emails

import (
	"strings"
	"testing"
)

// The provider takes any plain address on a domain name, in any script, and refuses only
// what is not one: it is a mail service, and the rules of a shop for its customers'
// addresses are the shop's to check.
func TestTheProviderTakesAnyPlainAddressOnADomainName(t *testing.T) {
	for _, s := range []string{
		"ada@example.com", "ada.lovelace+orders@mail.example.co.uk", "josé@exämple.com",
		"ada@intranet.local", "ada@10.0.0.1.nip.io", // a shop may refuse these; the provider sends
	} {
		if p := addressProblem(s); p != "" {
			t.Errorf("%q: %s, want it taken", s, p)
		}
	}
	for _, s := range []string{
		"", "ada", "ada@", "@example.com", "ada@localhost", "ada@[127.0.0.1]", "ada@127.0.0.1", "ada@-example.com",
		"Ada <ada@example.com>", "ada@example.com (Ada)", `"a d a"@example.com`, "ada lovelace@example.com",
		"ada\u2028@example.com", "ada\u202e@example.com", "ada\x00@example.com", "ada\xff@example.com",
		strings.Repeat("a", 65) + "@example.com",
	} {
		if addressProblem(s) == "" {
			t.Errorf("%q taken, want it refused", s)
		}
	}
}
