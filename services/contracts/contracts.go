// Package contracts is Bookstore's vocabulary: the fixed points of docs/contracts.md that
// code names, written once, as Go. The event types and their data, the broker topology,
// the failpoint names, the limits of an order and the rule of a customer's email address
// are here; the services, their tests, the end-to-end tests and the chaos harness take
// them from here, so a name cannot drift between a producer and its consumers.
//
// The mechanisms that carry these names live in services/platform, which knows no
// system's names: they are given to it. A change here is a change of the contracts, and
// changes docs/contracts.md and the tools in the same commit.
package contracts
