package testenv

import "testing"

// Contracts checks what a system's tests send and receive against the system's
// machine-readable contracts. The platform knows no system's documents, so each test
// package sets it once, beside Topology (Bookstore's: apitest.Checker, over api/). A test
// that starts a service (StartProcess, StartInProcess) fails while it is unset, so no
// traffic goes unchecked by omission.
var Contracts ContractChecker

// ContractChecker is what a system's contracts offer the tests.
type ContractChecker interface {
	// Watch checks, until t ends, every HTTP exchange with the service at base (name is
	// the binary's name, or "" when unknown) and fails t with each that breaks the
	// service's contract.
	Watch(t testing.TB, base, name string)
	// IsEvent reports whether typ is an event type of the contracts.
	IsEvent(typ string) bool
	// CheckMessage says what is wrong with an event message, or nil.
	CheckMessage(contentType, messageID, typ string, body []byte) error
}

func watch(t testing.TB, base, name string) {
	t.Helper()
	if Contracts == nil {
		t.Fatal("testenv.Contracts is not set: set it in TestMain, beside testenv.Topology, so that every request to the service is checked against its contract")
	}
	Contracts.Watch(t, base, name)
}
