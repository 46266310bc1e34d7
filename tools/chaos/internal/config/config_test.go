package config

import (
	"strings"
	"testing"
	"time"
)

// An outage that a budget would have survived proves nothing about it: the configuration
// is refused, and says which budget.
func TestAnOutageShorterThanABudgetIsRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Config)
		budget string
	}{
		{"the queues' delivery limit against 2 s outages", func(c *Config) { c.RelayMaxAttempts, c.OutageLength = 1, 2*time.Second }, "consumer"},
		{"the relay's default attempts", func(c *Config) { c.RelayMaxAttempts = 25 }, "relay"},
		{"a 2 s outage", func(c *Config) { c.OutageLength = 2 * time.Second }, "relay"},
	} {
		cfg := Default
		c.change(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "the "+c.budget+" budget") {
			t.Errorf("%s: validate() = %v, want the %s budget named", c.name, err, c.budget)
		}
		cfg.Outages = 0
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s without outages: %v", c.name, err)
		}
	}
}
