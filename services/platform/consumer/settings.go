package consumer

import (
	"strconv"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/config"
)

// Retry is a consumer's retry pacing, read from the environment.
type Retry struct {
	Base, Max time.Duration
	// MaxMessageSize is Config.MaxMessageSize. It sits with the retry pacing because it is
	// a consumer's too, and every service that consumes declares these.
	MaxMessageSize int
	// Producer, when set, replaces Config.Producer: the broker user whose events the
	// consumer takes, where the services log in otherwise than the contract says.
	Producer string
}

// RetryVariables returns the variables of a consumer's retry pacing for config.Parse,
// bound to a Retry, with max as the default ceiling. Together with the queue's
// x-delivery-limit they are the budget of a message that keeps failing on healthy
// dependencies; an outage spends none of it.
func RetryVariables(max string) (*Retry, []config.Var) {
	r := &Retry{}
	return r, []config.Var{
		config.Duration("CONSUMER_RETRY_BASE", "100ms", "first wait before a failed message is requeued, and before a paused consumer asks its database again; doubles per failure, with jitter", &r.Base),
		config.Duration("CONSUMER_RETRY_MAX", max, "the longest of those waits", &r.Max),
		config.String("CONSUMER_PRODUCER", "", "the broker user whose events the consumer takes (the AMQP user-id of its producer's messages; any other is dead-lettered unread); empty: the contract's, the producing service's own user (ordering for order events, inventory for stock events)", &r.Producer),
		config.Int("CONSUMER_MAX_MESSAGE_SIZE", strconv.Itoa(DefaultMaxMessageSize), "the largest message body the consumer reads, in bytes; a larger one is dead-lettered at once, unread (the broker's max_message_size is the bound above it)", &r.MaxMessageSize),
	}
}
