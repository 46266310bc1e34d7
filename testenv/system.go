package testenv

import (
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// System is the system under test as testenv's helpers need it: the broker topology they
// declare and publish to, and the contracts they check traffic against. The platform
// knows no system's names or documents, so each test package builds one value and calls
// the helpers through it:
//
//	var sut = testenv.System{Topology: contracts.Topology, Contracts: apitest.Checker{}}
//
// The platform's own tests use ExampleTopology and no contracts. Starting a service
// (StartProcess, StartInProcess) fails the test while Contracts is nil, so no traffic
// goes unchecked by omission.
type System struct {
	Topology  broker.Topology
	Contracts ContractChecker
}

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

func (s System) watch(t testing.TB, base, name string) {
	t.Helper()
	if s.Contracts == nil {
		t.Fatal("testenv.System has no Contracts: give the test package's System its contracts, beside its Topology, so that every request to the service is checked against its contract")
	}
	s.Contracts.Watch(t, base, name)
}
