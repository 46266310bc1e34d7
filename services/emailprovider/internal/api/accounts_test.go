package api

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// EMAILPROVIDER_API_KEYS names each key's scopes after its colon, each further scope
// after a comma; a key without scopes may send and read, never change the faults; a
// scope the provider does not know, or one with no key before it, is refused whole.
func TestAKeysScopesAreTheNamedOnesOrSendAndRead(t *testing.T) {
	const (
		a = "key-a-0123456789abcdef0123456789ab"
		b = "key-b-0123456789abcdef0123456789ab"
		c = "key-c-0123456789abcdef0123456789ab"
	)
	keys, err := ParseAPIKeys("bookstore:" + a + ":send,read, bookstore:" + b + ":read,other:" + c)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]caller{
		a: {"bookstore", ScopeSend | ScopeRead},
		b: {"bookstore", ScopeRead},
		c: {"other", DefaultScopes},
	} {
		if got := keys.callers[sha256.Sum256([]byte(key))]; got != want {
			t.Errorf("%s: %+v (%s), want %+v (%s)", key, got, got.scopes, want, want.scopes)
		}
	}
	if DefaultScopes&ScopeAdmin != 0 {
		t.Errorf("a key without scopes may administer: %s", DefaultScopes)
	}
	for _, spec := range []string{
		"bookstore:" + a + ":write",
		"bookstore:" + a + ":read,delete",
		"read,bookstore:" + a,
		"bookstore:" + a + ",admin", // a scope after an entry that named none
		"bookstore:" + a + ":",
	} {
		_, err := ParseAPIKeys(spec)
		if err == nil {
			t.Errorf("%q was taken", spec)
		} else if strings.Contains(err.Error(), a) {
			t.Errorf("%q: the error quotes the key: %v", spec, err)
		}
	}
}
