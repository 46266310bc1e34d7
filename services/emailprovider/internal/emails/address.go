package emails

import (
	"crypto/sha256"
	"encoding/hex"
	"net/mail"
	"strings"
	"unicode"
)

// maxAddressLen is the longest recipient the provider takes: SMTP's 256-octet path less
// its angle brackets.
const maxAddressLen = 254

// addressProblem says what is wrong with s as a recipient, or "" when the provider sends
// to it. The provider's rule is a mail service's, and no shop's: a plain address (no
// display name, no comment, no quoted local part) of at most 254 bytes, its local part
// at most 64, on a domain of two or more dot-separated names of letters, digits and
// inner hyphens, the last not a number (no IP address, no single label); no white
// space, control or invisible formatting character anywhere. It knows nothing of Unicode
// normal forms, mixed scripts or domains that lead into someone's own network: a caller
// with rules of its own for the addresses it takes checks them before it sends.
func addressProblem(s string) string {
	const plain = "must be a plain email address such as ada@example.com"
	if len(s) > maxAddressLen {
		return "must be at most 254 characters"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar {
			return "must not contain white space, control or invisible formatting characters"
		}
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return plain
	}
	at := strings.LastIndexByte(s, '@')
	if at > 64 {
		return "the part before @ must be at most 64 characters"
	}
	labels := strings.Split(s[at+1:], ".")
	if len(labels) < 2 {
		return "the domain must be a name with a dot in it, such as example.com"
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") ||
			strings.IndexFunc(l, func(r rune) bool { return r != '-' && !unicode.IsLetter(r) && !unicode.IsDigit(r) }) >= 0 {
			return "the domain must be dot-separated names of letters, digits and inner hyphens"
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "the domain must end in a name, not a number"
	}
	return ""
}

// contentHash is the content_sha256 the provider answers with an email: the hex SHA-256
// of its subject, a line feed, and its text. A subject is one line, so the line feed
// separates the two unambiguously. The API documents it, so that a caller reconciling a
// key can compute it for the email it meant and compare.
func contentHash(subject, text string) string {
	h := sha256.New()
	h.Write([]byte(subject))
	h.Write([]byte{'\n'})
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}
