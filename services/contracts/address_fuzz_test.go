package contracts_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"

	"github.com/bookstore-go/bookstore/services/contracts"
)

// FuzzAnAcceptedAddressHasOneForm: whatever the string, AddressProblem answers without
// panicking, and an address it accepts is valid UTF-8 in NFC, no longer than SMTP
// carries, and in its one form: normalising its local part (NFKC) or mapping its domain
// through IDNA changes nothing but letter case, and the same domain spelt in ASCII
// (punycode) or in Unicode gets the same verdict.
func FuzzAnAcceptedAddressHasOneForm(f *testing.F) {
	for _, seed := range []string{
		"ada@example.com", "Ada@Example.COM", "ada@bücher.example", "ada@xn--bcher-kva.example",
		"иван@пример.рф", "taro@ひらがな漢字.jp",
		"ada@ex\u0430mple.com", "ada@xn--exmple-4nf.com", "ada@\uff45xample.com", "\uff41da@example.com",
		"ada@exa\u0301mple.com", "ade\u0301@example.com", "ada@ﬁle.example", "ada@example\uff0ecom",
		"ada@localhost.localdomain", "ada@127.0.0.1.nip.io", "ada@127-0-0-1.sslip.io", "ada@10.0.0.1.example.com",
		"ada@example.test", "ada@[127.0.0.1]", "ada@ß.example", "ada@xn--zca.example", "ada@İ.example",
		"a@b.c", "", "@", "\xff@example.com",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if contracts.AddressProblem(s) != "" {
			return
		}
		if !utf8.ValidString(s) || !norm.NFC.IsNormalString(s) || len(s) > contracts.MaxAddressLen {
			t.Fatalf("%q: accepted, but not valid UTF-8 in NFC of at most 254 bytes", s)
		}
		at := strings.LastIndexByte(s, '@')
		local, domain := s[:at], s[at+1:]
		if norm.NFKC.String(local) != local {
			t.Fatalf("%q: accepted, but its local part normalises to %q", s, norm.NFKC.String(local))
		}
		ascii, err := idna.Lookup.ToASCII(domain)
		if err != nil {
			t.Fatalf("%q: accepted, but IDNA refuses its domain: %v", s, err)
		}
		unicodeForm, err := idna.Lookup.ToUnicode(ascii)
		if err != nil {
			t.Fatalf("%q: accepted, but IDNA cannot read back %q: %v", s, ascii, err)
		}
		if !strings.EqualFold(domain, ascii) && !strings.EqualFold(domain, unicodeForm) {
			t.Fatalf("%q: accepted, but its domain maps to %q (%q)", s, unicodeForm, ascii)
		}
		for _, other := range []string{ascii, unicodeForm} {
			if p := contracts.AddressProblem(local + "@" + other); p != "" && len(local)+1+len(other) <= contracts.MaxAddressLen {
				t.Fatalf("%q is accepted, but the same domain spelt %q is not: %s", s, other, p)
			}
		}
	})
}
