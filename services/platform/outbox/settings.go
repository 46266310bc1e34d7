package outbox

import (
	"time"

	"github.com/bookstore-go/bookstore/services/platform/config"
)

// Settings are the relay's environment variables, the same in every service that runs a
// relay.
type Settings struct {
	ID             string
	Lease          time.Duration
	ConfirmTimeout time.Duration
	BatchSize      int
	MaxAttempts    int
}

// Variables returns the relay's variables for config.Parse, bound to the Settings.
func Variables() (*Settings, []config.Var) {
	s := &Settings{}
	d := DefaultConfig
	return s, []config.Var{
		config.String("RELAY_ID", "", "this relay's name in outbox claims; a restarted relay takes back its claims at once; empty: random", &s.ID),
		config.Duration("RELAY_LEASE", d.Lease.String(), "how long a claim keeps other relays off a row; a dead relay's rows wait this long; must outlast a publish (5s dial + RELAY_CONFIRM_TIMEOUT + 5s)", &s.Lease),
		config.Duration("RELAY_CONFIRM_TIMEOUT", "10s", "how long a batch waits for the broker's confirms before the broker counts as unavailable", &s.ConfirmTimeout),
		config.Int("RELAY_BATCH_SIZE", "256", "outbox rows claimed and published at once", &s.BatchSize),
		config.Int("RELAY_MAX_ATTEMPTS", "25", "publishes the broker refused (nack, unroutable) before a row is parked as dead; outages spend none", &s.MaxAttempts),
	}
}

// Config is the relay's Config for the service appID.
func (s *Settings) Config(appID string) Config {
	return Config{ID: s.ID, AppID: appID, BatchSize: s.BatchSize, Lease: s.Lease, MaxAttempts: s.MaxAttempts}
}
