package config

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The load profile (make chaos-load): every service but the email provider runs
// as two processes, the load is offered at half of what BenchmarkSystemThroughput emails
// on the development machine or more, and every fault kind strikes meanwhile. What the
// default run asks of the design at 20 orders a second, this one asks at the rate the
// system is built for, where a fault's backlog competes with live traffic for the cores.

// procSpec is one process of the run's layout.
type procSpec struct {
	Name, Service string
	Args          []string
	Extra         []string // its environment beyond the common one
}

// Layout returns the run's processes in start order: the provider first (notification
// needs it), inventory before ordering (it seeds the catalogue the load orders from).
// The default run has six: one ordering API with its relay, a second relay as a process
// of its own, two inventories, one notification. Doubled, every service but the provider
// (a third party) runs twice, and each ordering process is an API with its own relay.
// Every relay has a RELAY_ID of its own.
func (c Config) Layout(inventoryEnv, notificationEnv, orderingEnv []string) []procSpec {
	// slices.Clip: appends to one shared slice with room to spare would share its array,
	// and the last RELAY_ID would overwrite the others.
	with := func(env []string, more ...string) []string {
		out := append(slices.Clip(env), more...)
		if c.PoolSize > 0 {
			out = append(out, fmt.Sprintf("DATABASE_MAX_CONNS=%d", c.PoolSize))
		}
		return out
	}
	provider := procSpec{Name: "emailprovider", Service: "emailprovider", Extra: with([]string{"EMAILPROVIDER_ADMIN=1"})}
	inventory := []procSpec{
		{Name: "inventory-1", Service: "inventory", Extra: with(inventoryEnv, "RELAY_ID=inventory-1")},
		{Name: "inventory-2", Service: "inventory", Extra: with(inventoryEnv, "RELAY_ID=inventory-2")},
	}
	if !c.Doubled {
		return append(append([]procSpec{provider}, inventory...),
			procSpec{Name: "notification", Service: "notification", Extra: with(notificationEnv)},
			procSpec{Name: "ordering", Service: "ordering", Extra: with(orderingEnv, "RELAY_ID=ordering")},
			procSpec{Name: "ordering-relay", Service: "ordering", Args: []string{"relay"}, Extra: with(orderingEnv, "RELAY_ID=ordering-relay")},
		)
	}
	return append(append([]procSpec{provider}, inventory...),
		procSpec{Name: "notification-1", Service: "notification", Extra: with(notificationEnv)},
		procSpec{Name: "notification-2", Service: "notification", Extra: with(notificationEnv)},
		procSpec{Name: "ordering-1", Service: "ordering", Extra: with(orderingEnv, "RELAY_ID=ordering-1")},
		procSpec{Name: "ordering-2", Service: "ordering", Extra: with(orderingEnv, "RELAY_ID=ordering-2")},
	)
}

// ProcessNames returns the names of the layout's processes of service.
func (c Config) ProcessNames(service string) []string {
	var out []string
	for _, p := range c.Layout(nil, nil, nil) {
		if p.Service == service {
			out = append(out, p.Name)
		}
	}
	return out
}

// OrderingAPIs returns the processes that serve ordering's HTTP API (not `ordering relay`):
// the load spreads its requests over them.
func (c Config) OrderingAPIs() []string {
	var out []string
	for _, p := range c.Layout(nil, nil, nil) {
		if p.Service == "ordering" && len(p.Args) == 0 {
			out = append(out, p.Name)
		}
	}
	return out
}

// RelayProcesses returns the processes that run an outbox relay: every ordering process
// (unless ordering publishes directly) and every inventory.
func (c Config) RelayProcesses() []string {
	relays := c.ProcessNames("inventory")
	if c.Publisher == "outbox" {
		relays = append(relays, c.ProcessNames("ordering")...)
	}
	return relays
}

// loadProfile is make chaos-load. The rate is half of what BenchmarkSystemThroughput
// emailed at concurrency 64 on the development machine (docs/performance.md), rounded up;
// three minutes of it, with fewer faults of each kind than the default run's 100 (the
// load is ten times the default's, so each fault meets ten times the traffic) and two
// outages of each kind, keep `make chaos-load` under ten minutes.
//
// Each process's pool is 5 connections instead of the services' 12: seven processes of
// 12, their LISTEN connections and the harness's own would take 100, and the machine's
// Postgres allows 100 for everyone (the first run of this profile had ordering fail to
// start on "remaining connection slots are reserved").
var loadProfile = struct {
	Rate          float64
	Seconds       int
	FaultsPerKind int
	Outages       int
	MaxInFlight   int
	PoolSize      int
	HeavyFaults   int
	QuietTimeout  time.Duration
}{Rate: 80, Seconds: 180, FaultsPerKind: 30, Outages: 2, MaxInFlight: 2000, PoolSize: 5, HeavyFaults: 1, QuietTimeout: 4 * time.Minute}

// applyProfile sets the profile's defaults for every flag not given on the command line.
func (c *Config) applyProfile(fs *flag.FlagSet, compare bool) error {
	switch c.Profile {
	case "":
		return nil
	case "load":
	case "cluster":
		return c.applyClusterProfile(fs, compare)
	case "soak":
		return c.applySoakProfile(fs)
	default:
		return fmt.Errorf("-profile %q: want load, cluster, soak, or none", c.Profile)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set := func(name string, apply func()) {
		if !given[name] {
			apply()
		}
	}
	set("double", func() { c.Doubled = true })
	set("rate", func() { c.Rate = loadProfile.Rate })
	set("orders", func() { c.Orders = int(c.Rate * float64(loadProfile.Seconds)) })
	set("faults", func() { c.FaultsPerKind = loadProfile.FaultsPerKind })
	set("outages", func() { c.Outages = loadProfile.Outages })
	set("max-in-flight", func() { c.MaxInFlight = loadProfile.MaxInFlight })
	set("pool-size", func() { c.PoolSize = loadProfile.PoolSize })
	set("heavy-faults", func() { c.HeavyFaults = loadProfile.HeavyFaults })
	set("quiet-timeout", func() { c.QuietTimeout = loadProfile.QuietTimeout })
	set("prefix", func() { c.Prefix = "chaosload" })
	return nil
}

// joinNames lists names for a report: "a, b and c".
func joinNames(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
