package outbox

import (
	"strconv"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/config"
)

// EnvSettings are the relay's settings as the environment gives them (RELAY_*), the same
// in every service that runs a relay; Config and Publisher turn them into what the relay
// runs with.
type EnvSettings struct {
	ID             string
	Lease          time.Duration
	ConfirmTimeout time.Duration
	BatchSize      int
	MaxAttempts    int
}

// EnvVariables returns the relay's variables for config.Parse, bound to the EnvSettings.
// Their defaults are DefaultConfig's.
func EnvVariables() (*EnvSettings, []config.Var) {
	s := &EnvSettings{}
	d := DefaultConfig
	return s, []config.Var{
		config.String("RELAY_ID", "", "this relay's name in outbox claims; a restarted relay takes back its claims at once; empty: random", &s.ID),
		config.Duration("RELAY_LEASE", d.Lease.String(), "how long a claim keeps other relays off a row; a dead relay's rows wait this long; must outlast a publish (5s dial + RELAY_CONFIRM_TIMEOUT + 5s)", &s.Lease),
		config.Duration("RELAY_CONFIRM_TIMEOUT", "10s", "how long a batch waits for the broker's confirms before the broker counts as unavailable", &s.ConfirmTimeout),
		config.Int("RELAY_BATCH_SIZE", strconv.Itoa(d.BatchSize), "outbox rows claimed and published at once", &s.BatchSize),
		config.Int("RELAY_MAX_ATTEMPTS", strconv.Itoa(d.MaxAttempts), "publishes the broker returned (unroutable) before a row is parked as dead; outages and nacks spend none", &s.MaxAttempts),
	}
}

// Config is the relay's Config for the service appID, from these settings.
func (s *EnvSettings) Config(appID string) Config {
	return Config{ID: s.ID, AppID: appID, BatchSize: s.BatchSize, Lease: s.Lease, MaxAttempts: s.MaxAttempts}
}

// Publisher is the relay's publisher on conn to t, the system's whole topology: each
// queue bound to an event's type gets its own copy of the event.
func (s *EnvSettings) Publisher(conn *broker.Conn, t broker.Topology) *broker.Publisher {
	return broker.NewPublisher(conn, t, s.ConfirmTimeout)
}
