package contracts

import (
	"net/mail"
	"strings"
	"unicode"
)

// MaxAddressLen is the longest email address SMTP carries (RFC 5321's 256-octet path less
// its angle brackets).
const MaxAddressLen = 254

// AddressProblem says what is wrong with s as a customer's email address, or "" when it
// is one: the rule ordering applies to an order's customer and the email provider to a
// recipient. A plain address (no display name, no comments) whose domain is a name on
// the internet: two or more dot-separated labels of letters, digits and inner hyphens,
// not an IP literal nor a single label such as localhost (mail into the shop's own
// network). No control or format character (the bidi overrides among them), which would
// make the address read differently from what it is on every page that shows it.
func AddressProblem(s string) string {
	const plain = "must be a plain email address such as ada@example.com"
	if len(s) > MaxAddressLen {
		return "must be at most 254 characters"
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar {
			return "must not contain control or invisible formatting characters"
		}
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return plain
	}
	at := strings.LastIndexByte(s, '@')
	local, domain := s[:at], s[at+1:]
	if len(local) > 64 {
		return "the part before @ must be at most 64 characters"
	}
	if strings.HasPrefix(domain, "[") {
		return "the domain must be a name, not an IP address"
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return "the domain must be a name with a dot in it, such as example.com"
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") ||
			strings.IndexFunc(l, func(r rune) bool { return r != '-' && !unicode.IsLetter(r) && !unicode.IsDigit(r) }) >= 0 {
			return "the domain must be dot-separated names of letters, digits and inner hyphens"
		}
	}
	if strings.IndexFunc(labels[len(labels)-1], unicode.IsLetter) < 0 {
		return "the domain must end in a name, not a number"
	}
	return ""
}
