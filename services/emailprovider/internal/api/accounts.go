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

// APIKeys are the provider's callers: each API key and the account it sends for. An
// account may hold several keys (notification sends, the storefront reads), and sees
// only its own emails; its Idempotency-Keys are its own, so the same key from another
// account is another email, and a key nobody holds cannot be taken first.
type APIKeys struct {
	accounts map[[sha256.Size]byte]string // by the SHA-256 of the key
}

var accountName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ParseAPIKeys reads EMAILPROVIDER_API_KEYS: comma-separated account:key pairs, such as
// "bookstore:<notification's key>,bookstore:<the storefront's key>". An account is a
// lower-case name; a key is at least MinAPIKeyLen printable ASCII characters without
// spaces or commas, and belongs to one account only. No pair at all is refused: a
// provider that takes every caller is the problem this solves.
func ParseAPIKeys(spec string) (APIKeys, error) {
	k := APIKeys{accounts: map[[sha256.Size]byte]string{}}
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		account, key, ok := strings.Cut(pair, ":")
		switch {
		case !ok || !accountName.MatchString(account):
			return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: %q is not account:key with an account of a-z, 0-9 and inner hyphens", redact(pair))
		case len(key) < MinAPIKeyLen || strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
			return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: the key of account %q must be at least %d printable ASCII characters without spaces", account, MinAPIKeyLen)
		}
		h := sha256.Sum256([]byte(key))
		if _, dup := k.accounts[h]; dup {
			return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS: a key of account %q is listed twice", account)
		}
		k.accounts[h] = account
	}
	if len(k.accounts) == 0 {
		return APIKeys{}, fmt.Errorf("EMAILPROVIDER_API_KEYS is empty: list each caller's account:key (deploy/local/run.sh and docker-compose.yml set them)")
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

// account returns the account whose key the request presents as Authorization: Bearer.
// The key is looked up by its hash, and the hash compared in constant time, so neither
// the lookup nor the comparison tells a caller how much of a key it got right.
func (k APIKeys) account(r *http.Request) (string, bool) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(key)))
	for known, account := range k.accounts {
		if subtle.ConstantTimeCompare(known[:], h[:]) == 1 {
			return account, true
		}
	}
	return "", false
}

type accountKey struct{}

// authenticate lets through requests that present a known API key, with its account in
// their context, and answers every other one 401 unauthenticated.
func (k APIKeys) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account, ok := k.account(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="emailprovider"`)
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusUnauthorized, "unauthenticated", "Unauthenticated",
				"send Authorization: Bearer <API key> with a key the provider was given in EMAILPROVIDER_API_KEYS"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, account)))
	})
}

// accountOf is the account authenticate found for the request.
func accountOf(r *http.Request) string {
	account, _ := r.Context().Value(accountKey{}).(string)
	return account
}
