package contracts

import (
	"net/mail"
	"net/netip"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
)

// MaxAddressLen is the longest email address SMTP carries (RFC 5321's 256-octet path less
// its angle brackets).
const MaxAddressLen = 254

// AddressProblem says what is wrong with s as a customer's email address, or "" when it
// is one: the one rule for an address wherever one enters the system, ordering's
// customer and the addresses event data carries. The email provider, a third party, has
// a looser rule of its own for a recipient, which every address taken here keeps. A plain
// address (no display name, no comments) whose domain is a name on the internet: two or
// more dot-separated labels of letters, digits and inner hyphens, not an IP literal nor a
// single label such as localhost (mail into the shop's own network). No white space,
// control or format character (the bidi overrides among them), which would make the
// address read differently from what it is on every page that shows it.
//
// An address must also read as what it is, and in one form only: it is in Unicode NFC;
// its local part has no compatibility form (a full-width ａ is not an a); its domain is
// what IDNA (UTS 46, the lookup profile) maps it to, up to letter case, so a full-width
// or ligature form that a mail server would send to another domain is refused rather
// than stored as a second spelling; and no label of it, nor its local part, mixes scripts
// beyond those a language writes together (exаmple.com with a Cyrillic а is refused, in
// punycode too). Whole-script look-alikes (a domain all in Cyrillic that reads as a Latin
// one) need the confusables table of UTS 39 and are not caught here.
//
// And its domain must not lead back into the machine or its network where that is
// knowable without DNS: reserved names (localhost and *.localhost, localhost.localdomain,
// .local, .invalid, .test), wildcard DNS services that answer with the address spelt in
// the name (nip.io, sslip.io and the like), and names with a loopback, private or
// link-local IPv4 address in their labels. The documentation names example.com, .org
// and .example stay accepted: the shop's demos, tests and load use them.
func AddressProblem(s string) string {
	const plain = "must be a plain email address such as ada@example.com"
	if len(s) > MaxAddressLen {
		return "must be at most 254 characters"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar {
			return "must not contain white space, control or invisible formatting characters"
		}
	}
	if !norm.NFC.IsNormalString(s) {
		return "must be in Unicode normal form C (an accent composed with its letter)"
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
	if !norm.NFKC.IsNormalString(local) {
		return "the part before @ must not use full-width or other compatibility forms of letters"
	}
	if mixesScripts(local) {
		return "the part before @ must not mix letters of different scripts"
	}
	if strings.HasPrefix(domain, "[") {
		return "the domain must be a name, not an IP address"
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return "the domain must be a name with a dot in it, such as example.com"
	}
	if p := labelsProblem(labels); p != "" {
		return p
	}
	unicodeForm, p := domainFormProblem(domain)
	if p != "" {
		return p
	}
	// A punycode label is held to the rule of what it spells.
	if p := labelsProblem(strings.Split(unicodeForm, ".")); p != "" {
		return p
	}
	if p := domainHomeProblem(strings.ToLower(domain)); p != "" {
		return p
	}
	return ""
}

// labelsProblem says why the labels of a domain are not names of letters, digits and
// inner hyphens, ending in a name.
func labelsProblem(labels []string) string {
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

// lookup is IDNA as a resolver applies it to a name before asking DNS (UTS 46
// nontransitional, with the bidi and joiner rules and the lengths of DNS).
var lookup = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.ValidateLabels(true),
	idna.StrictDomainName(true), idna.VerifyDNSLength(true), idna.Transitional(false))

// domainFormProblem returns domain as IDNA writes it in Unicode, and says why domain is
// not the one form of a name IDNA maps it to, or reads as another name.
func domainFormProblem(domain string) (unicodeForm, problem string) {
	const invalid = "the domain must be a valid internationalised name (IDNA)"
	ascii, err := lookup.ToASCII(domain)
	if err != nil {
		return "", invalid
	}
	unicodeForm, err = lookup.ToUnicode(ascii)
	if err != nil {
		return "", invalid
	}
	// Written in Unicode, it must be what IDNA maps it to; written in ASCII (punycode
	// included), it must be what IDNA writes; either up to letter case only (IDNA maps
	// some scripts, Cherokee, to upper case).
	if !strings.EqualFold(domain, unicodeForm) && !strings.EqualFold(domain, ascii) {
		return "", "the domain must be written as IDNA maps it (no full-width or compatibility forms)"
	}
	for _, l := range strings.Split(unicodeForm, ".") {
		if mixesScripts(l) {
			return "", "a name in the domain must not mix letters of different scripts, as look-alike domains do"
		}
	}
	return unicodeForm, ""
}

// scriptSets are the scripts a language writes together in one word (UTS 39's "highly
// restrictive" level): Latin with the Han-based scripts of Japanese, Chinese and Korean.
var scriptSets = [][]string{
	{"Latin", "Han", "Hiragana", "Katakana"},
	{"Latin", "Han", "Bopomofo"},
	{"Latin", "Han", "Hangul"},
}

// mixesScripts reports whether the letters of s come from scripts no one language
// writes together in a word, such as Latin and Cyrillic. Digits, punctuation and
// combining marks (the Common and Inherited scripts) go with any.
func mixesScripts(s string) bool {
	seen := map[string]bool{}
	for _, r := range s {
		if r < 0x80 {
			if unicode.IsLetter(r) {
				seen["Latin"] = true
			}
			continue
		}
		for name, table := range unicode.Scripts {
			if name != "Common" && name != "Inherited" && unicode.Is(table, r) {
				seen[name] = true
				break
			}
		}
	}
	if len(seen) <= 1 {
		return false
	}
	for _, set := range scriptSets {
		within := 0
		for _, name := range set {
			if seen[name] {
				within++
			}
		}
		if within == len(seen) {
			return false
		}
	}
	return true
}

// reservedTLDs are the top-level names no public mail server is under (RFC 2606, 6761,
// 6762): mail to them goes to the local machine or network, or nowhere.
var reservedTLDs = map[string]bool{"localhost": true, "localdomain": true, "local": true, "invalid": true, "test": true, "internal": true, "home.arpa": true}

// wildcardDNS are services whose every name answers with an address chosen by whoever
// writes the name (127.0.0.1.nip.io is 127.0.0.1), or with loopback itself.
var wildcardDNS = []string{"nip.io", "sslip.io", "xip.io", "traefik.me", "localtest.me", "lvh.me", "vcap.me", "localhost.direct", "lacolhost.com"}

// domainHomeProblem says why a lower-case domain leads back into the shop's machine or
// network, as far as its name tells without DNS.
func domainHomeProblem(domain string) string {
	labels := strings.Split(domain, ".")
	if reservedTLDs[labels[len(labels)-1]] || reservedTLDs[strings.Join(labels[max(len(labels)-2, 0):], ".")] {
		return "the domain must be on the internet, not a reserved or local name such as localhost, .test or .invalid"
	}
	for _, w := range wildcardDNS {
		if domain == w || strings.HasSuffix(domain, "."+w) {
			return "the domain must not be a wildcard DNS name that stands for an IP address (" + w + ")"
		}
	}
	// Four labels in a row that read as an IPv4 address (127.0.0.1.example.com), or one
	// label that spells one with dashes (127-0-0-1.example.com), in a range of this
	// machine or a private network.
	for i := 0; i+4 <= len(labels); i++ {
		if homeIP(strings.Join(labels[i:i+4], ".")) {
			return "the domain must not name a loopback or private IP address"
		}
	}
	for _, l := range labels {
		for _, part := range []string{l, strings.ReplaceAll(l, "-", ".")} {
			if homeIP(part) {
				return "the domain must not name a loopback or private IP address"
			}
		}
	}
	return ""
}

// homeIP reports whether s is an IPv4 address of this machine or of a private network.
func homeIP(s string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsLinkLocalMulticast())
}
