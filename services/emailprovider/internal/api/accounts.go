package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// MinAPIKeyLen is the shortest API key the provider takes: 128 bits of hex, so a key
// cannot be guessed in the lifetime of a machine.
const MinAPIKeyLen = 32

// APIKeys are the provider's callers: each API key, the account it sends for and what it
// may do there. An account may hold several keys (notification sends, the storefront
// reads), and sees only its own emails; its Idempotency-Keys are its own, so the same key
// from another account is another email, and a key nobody holds cannot be taken first.
type APIKeys struct {
	callers map[[sha256.Size]byte]caller // by the SHA-256 of the key
}

// caller is what one API key stands for: its account and its scopes.
type caller struct {
	account string
	scopes  Scopes
}

// Scopes are what a key may do, each a route's need: ScopeSend sends, ScopeRead reads
// the account's emails and the faults in force, ScopeAdmin changes the faults.
type Scopes uint8

// The scopes, as EMAILPROVIDER_API_KEYS names them.
const (
	ScopeSend Scopes = 1 << iota
	ScopeRead
	ScopeAdmin
)

// DefaultScopes are a key's scopes when EMAILPROVIDER_API_KEYS names none: send and read,
// what a sender needs; admin is granted only by name.
const DefaultScopes = ScopeSend | ScopeRead

var scopeNames = []struct {
	name  string
	scope Scopes
}{{"send", ScopeSend}, {"read", ScopeRead}, {"admin", ScopeAdmin}}

// String lists the scopes by name, comma-separated ("none" for none).
func (s Scopes) String() string {
	var names []string
	for _, n := range scopeNames {
		if s&n.scope != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// parseScope is the scope named name, or false.
func parseScope(name string) (Scopes, bool) {
	for _, n := range scopeNames {
		if n.name == name {
			return n.scope, true
		}
	}
	return 0, false
}

var accountName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ParseAPIKeys reads EMAILPROVIDER_API_KEYS: comma-separated account:key[:scopes]
// entries, such as "bookstore:<notification's key>:send,read,bookstore:<the storefront's
// key>:read". An account is a lower-case name; a key is at least MinAPIKeyLen printable
// ASCII characters without spaces, commas or colons, and belongs to one account only.
// The scopes are send, read and admin, the first after the key's colon and each further
// one after a comma (an item without a colon is a scope of the entry before it); an entry
// without scopes has DefaultScopes. No entry at all is refused: a provider that takes
// every caller is the problem this solves.
func ParseAPIKeys(spec string) (APIKeys, error) {
	type entry struct {
		hash  [sha256.Size]byte
		c     caller
		named bool // scopes were named, so an item without a colon may add one
	}
	var entries []entry
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, ":") {
			scope, ok := parseScope(item)
			if !ok || len(entries) == 0 || !entries[len(entries)-1].named {
				return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: %q is neither account:key[:scopes] nor a scope (send, read, admin) after one", redact(item))
			}
			entries[len(entries)-1].c.scopes |= scope
			continue
		}
		account, key, _ := strings.Cut(item, ":")
		key, scopeName, named := strings.Cut(key, ":")
		switch {
		case !accountName.MatchString(account):
			return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: %q is not account:key with an account of a-z, 0-9 and inner hyphens", redact(item))
		case len(key) < MinAPIKeyLen || strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
			return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: the key of account %q must be at least %d printable ASCII characters without spaces", account, MinAPIKeyLen)
		}
		e := entry{hash: sha256.Sum256([]byte(key)), c: caller{account: account, scopes: DefaultScopes}, named: named}
		if named {
			scope, ok := parseScope(scopeName)
			if !ok {
				return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: a key of account %q has scope %q, want send, read or admin", account, httpapi.Excerpt(scopeName))
			}
			e.c.scopes = scope
		}
		entries = append(entries, e)
	}
	k := APIKeys{callers: map[[sha256.Size]byte]caller{}}
	for _, e := range entries {
		if _, dup := k.callers[e.hash]; dup {
			return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: a key of account %q is listed twice", e.c.account)
		}
		k.callers[e.hash] = e.c
	}
	if len(k.callers) == 0 {
		return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS is empty: list each caller's account:key[:scopes] (deploy/local/run.sh and docker-compose.yml set them)")
	}
	return k, nil
}

// redact keeps an account:key pair's key out of an error message.
func redact(pair string) string {
	if account, _, ok := strings.Cut(pair, ":"); ok {
		return account + ":..."
	}
	return "..."
}

// caller returns the caller whose key the request presents as Authorization: Bearer.
// The key is looked up by its hash, and the hash compared in constant time, so neither
// the lookup nor the comparison tells a caller how much of a key it got right.
func (k APIKeys) caller(r *http.Request) (caller, bool) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return caller{}, false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(key)))
	for known, c := range k.callers {
		if subtle.ConstantTimeCompare(known[:], h[:]) == 1 {
			return c, true
		}
	}
	return caller{}, false
}

type callerKey struct{}

// authenticate lets through requests that present a known API key, with its account in
// their context, and answers every other one 401 unauthenticated.
func (k APIKeys) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := k.caller(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="emailprovider"`)
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusUnauthorized, "unauthenticated", "Unauthenticated",
				"send Authorization: Bearer <API key> with a key the provider was given in EMAILPROVIDER_API_KEYS"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// require lets through, after authenticate, the requests whose key has the scope, and
// answers every other one 403 forbidden naming the scope it lacks.
func require(scope Scopes) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _ := r.Context().Value(callerKey{}).(caller)
			if c.scopes&scope == 0 {
				httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusForbidden, "forbidden", "Forbidden",
					fmt.Sprintf("this API key lacks the scope %s, which %s %s needs; its scopes are %s", scope, r.Method, r.URL.Path, c.scopes)))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// accountOf is the account authenticate found for the request.
func accountOf(r *http.Request) string {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c.account
}
