package config

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// SoakConfig is the soak profile's part of a run (make soak): how long the load runs,
// the windows the report cuts it into, and how the rate is found when -rate is not given.
type SoakConfig struct {
	On          bool          // the run is a soak: -profile soak
	Duration    time.Duration // how long the load runs; the run's orders are the rate times this
	Window      time.Duration // the length of each reported window; the load holds whole windows only
	MeasureRate bool          // -rate was not given: the rate is half the capacity the probe measures
	Probe       time.Duration // the closed-loop burst that measures the capacity
	ProbeLoad   int           // orders in flight at once during the probe
}

// DefaultSoak is make soak's: 30 minutes of load in 5-minute windows, the capacity
// measured by 30 seconds of 64 orders in flight (the concurrency docs/performance.md's
// system benchmark reports).
var DefaultSoak = SoakConfig{Duration: 30 * time.Minute, Window: 5 * time.Minute, Probe: 30 * time.Second, ProbeLoad: 64}

// The soak's fault rates: every short fault kind once per soakShortEvery of load, every
// heavy kind and each kind of outage once per soakHeavyEvery, each at least once.
const (
	soakShortEvery = 3 * time.Minute
	soakHeavyEvery = 15 * time.Minute
)

func (s *SoakConfig) flags(fs *flag.FlagSet) {
	d := DefaultSoak
	fs.DurationVar(&s.Duration, "duration", d.Duration, "soak: how long the load runs (the orders are the rate times this)")
	fs.DurationVar(&s.Window, "window", d.Window, "soak: the length of each window of the report; the rules compare every window with the first")
	fs.DurationVar(&s.Probe, "capacity-probe", d.Probe, "soak without -rate: how long the closed-loop burst runs that measures the capacity (orders emailed per second)")
	fs.IntVar(&s.ProbeLoad, "capacity-concurrency", d.ProbeLoad, "soak without -rate: orders in flight at once during the capacity probe")
}

// applySoakProfile sets the soak's defaults for every flag not given on the command
// line: the default layout on a Postgres server of the run's own, a low rate of every
// fault kind over the duration, and the rate from -rate or, without it, from the
// capacity probe (SetSoakRate then).
func (c *Config) applySoakProfile(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set := func(name string, apply func()) {
		if !given[name] {
			apply()
		}
	}
	c.Soak.On = true
	c.Soak.MeasureRate = !given["rate"]
	every := func(d time.Duration) int { return max(1, int(c.Soak.Duration/d)) }
	set("faults", func() { c.FaultsPerKind = every(soakShortEvery) })
	set("heavy-faults", func() { c.HeavyFaults = every(soakHeavyEvery) })
	set("outages", func() { c.Outages = every(soakHeavyEvery) })
	set("prefix", func() { c.Prefix = "chaossoak" })
	// Autovacuum on, as in production: this machine's server has it off, and the run
	// changes no setting of the machine's.
	set("postgres", func() { c.AdminURL = PostgresOwn })
	c.SetSoakRate(c.Rate)
	return nil
}

// PostgresOwn is the -postgres that starts a Postgres server of the run's own
// (harness.OwnPostgres).
const PostgresOwn = "own"

// OwnPostgres reports whether the run starts a Postgres server of its own.
func (c Config) OwnPostgres() bool { return c.AdminURL == PostgresOwn }

// SetSoakRate sets the soak's rate and the orders that keep it up for the duration.
func (c *Config) SetSoakRate(rate float64) {
	c.Rate = rate
	c.Orders = max(1, int(rate*c.Soak.Duration.Seconds()))
}

// SoakWindows is how many whole windows the soak's load holds.
func (c Config) SoakWindows() int {
	if c.Soak.Window <= 0 {
		return 0
	}
	return int(c.Soak.Duration / c.Soak.Window)
}

func (c Config) validateSoak() []error {
	if !c.Soak.On {
		return nil
	}
	var errs []error
	if c.Soak.Window <= 0 {
		errs = append(errs, errors.New("-window must be positive"))
	} else if c.SoakWindows() < 2 {
		errs = append(errs, fmt.Errorf("-duration %v holds %d windows of %v; the soak compares later windows with the first, so it needs two or more", c.Soak.Duration, c.SoakWindows(), c.Soak.Window))
	}
	if c.Soak.MeasureRate && (c.Soak.Probe < 10*time.Second || c.Soak.ProbeLoad < 1) {
		errs = append(errs, errors.New("-capacity-probe must be 10s or more and -capacity-concurrency at least 1"))
	}
	return errs
}
