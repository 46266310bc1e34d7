package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// Budget is a retry budget of the services that an outage must not spend: a relay's
// attempts per row and a consumer's deliveries per message. A design that counted an
// outage's failures against them would park the row dead or dead-letter the message.
// The run shrinks each budget and makes every outage of its kind outlast it, so that a
// service that spent it would lose events, and the checker would say so (invariants 2,
// 5 and 6).
type Budget struct {
	Name   string        `json:"name"`   // relay | consumer
	Kind   string        `json:"kind"`   // the outage kind that must outlast it
	Who    string        `json:"who"`    // the processes that hold it
	Spends string        `json:"spends"` // the budget, e.g. "3 attempts (RELAY_MAX_ATTEMPTS=3)"
	Max    time.Duration `json:"max_ns"` // the longest outage the old behaviour survived with it
	How    string        `json:"how"`    // how Max is reckoned
	// Shrunk: the run set this budget, and every outage of Kind must outlast it. A
	// budget left at the services' own size is reported, not required.
	Shrunk bool `json:"shrunk"`
}

// The retry timing of the services. The relay's are outbox.DefaultConfig's, which the run
// does not change. The consumers' are shrunk for inventory and ordering
// (CONSUMER_RETRY_BASE and CONSUMER_RETRY_MAX in harness/system.go), so that the old consumer
// would have spent its 50 deliveries within seconds and every Postgres outage outlasts
// them; notification keeps its own, since its deliveries also pace the provider's retries.
const (
	relayBackoffBase   = 200 * time.Millisecond // a refused row waits this, doubling per attempt
	relayBackoffMax    = time.Minute
	relayPollInterval  = time.Second           // a relay with nothing new to do looks again after this
	ConsumerRetryBase  = 10 * time.Millisecond // a failed message waits this before its requeue, doubling
	ConsumerRetryMax   = 50 * time.Millisecond
	notificationMaxTry = 30 // NOTIFICATION_MAX_ATTEMPTS in harness/system.go
)

// Budgets are the budgets the run's outages must outlast. Each Max is the upper end of
// the jittered backoff (a delay is drawn from [d/2, d]), so an outage longer than Max
// would have spent the whole budget whatever the draws; the outages disable the links,
// so every failing try is refused at once and costs no time beyond its backoff.
func (c Config) Budgets() []Budget {
	var relay time.Duration
	for k := 1; k < c.RelayMaxAttempts; k++ {
		relay += step(relayBackoffBase, relayBackoffMax, k) + relayPollInterval
	}
	limit := c.DeliveryLimit
	policy := fmt.Sprintf("delivery limit %d (vhost policy) × backoff %v to %v (CONSUMER_RETRY_*)", limit, ConsumerRetryBase, ConsumerRetryMax)
	if limit == 0 {
		limit = broker.DeliveryLimit
		policy = fmt.Sprintf("delivery limit %d × backoff %v to %v (CONSUMER_RETRY_*)", limit, ConsumerRetryBase, ConsumerRetryMax)
	}
	var consumer time.Duration
	for k := 1; k <= limit+1; k++ {
		consumer += step(ConsumerRetryBase, ConsumerRetryMax, k)
	}
	return []Budget{
		{
			Name: "relay", Kind: check.FaultBrokerOutage, Who: strings.Join(append(c.ProcessNames("ordering"), c.ProcessNames("inventory")...), ", "),
			Spends: fmt.Sprintf("%d attempts (RELAY_MAX_ATTEMPTS=%d)", c.RelayMaxAttempts, c.RelayMaxAttempts),
			Max:    relay, Shrunk: true,
			How: fmt.Sprintf("each failed publish spent an attempt; the row was tried again after its backoff (%v doubling) at the next wake-up (at most a %v poll), and parked dead at the last attempt",
				relayBackoffBase, relayPollInterval),
		},
		{
			Name: "consumer", Kind: check.FaultPostgresOutage, Who: strings.Join(append(c.ProcessNames("inventory"), c.OrderingAPIs()...), ", "),
			Spends: policy,
			Max:    consumer, Shrunk: true,
			How: fmt.Sprintf("each failure with the database down was requeued after a backoff (%v doubling to %v), spending a delivery; past the limit the message was dead-lettered",
				ConsumerRetryBase, ConsumerRetryMax),
		},
	}
}

// BudgetOf returns the budget an outage of kind must outlast.
func (c Config) BudgetOf(kind string) (Budget, bool) {
	for _, b := range c.Budgets() {
		if b.Kind == kind {
			return b, true
		}
	}
	return Budget{}, false
}

// BudgetNotes say which budgets the run leaves at the services' own size, and why.
func (c Config) BudgetNotes() []string {
	notes := []string{fmt.Sprintf("Notification keeps its own retry pacing (up to 30 s) and delivery limit of %d: its deliveries also pay for provider failures (NOTIFICATION_MAX_ATTEMPTS=%d), so a Postgres outage does not outlast its budget; its consumer pauses like the others.",
		broker.DeliveryLimit, notificationMaxTry)}
	if c.DeliveryLimit == 0 {
		notes = append(notes, fmt.Sprintf("The consumers' delivery limit is left at the queues' own %d, and their backoff shrunk instead: RabbitMQ 3.10 also spends a delivery on every return to the queue (a channel closed, a consumer killed), and with --delivery-limit 5 the default run dead-lettered valid messages.",
			broker.DeliveryLimit))
	}
	return notes
}

// step is the upper end of retry number k's backoff: base doubled k-1 times, capped.
func step(base, ceiling time.Duration, k int) time.Duration {
	d := base << min(k-1, 20)
	if d <= 0 || d > ceiling {
		return ceiling
	}
	return d
}
