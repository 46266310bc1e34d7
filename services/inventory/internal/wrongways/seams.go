package wrongways

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// ErrDuplicate is what FailingDuplicates returns for a message its handler skipped.
var ErrDuplicate = errors.New("duplicate message")

// FailingDuplicates wraps handle so that a message it skips as a duplicate fails instead
// of succeeding: the "seen it before" that is thrown as an error. The consumer then
// treats the duplicate as any failed message: it rejects it back to the queue, the broker
// delivers it again, the inbox says duplicate again, and so on until the queue's delivery
// limit sends it to the dead-letter queue, where an operator finds a message that had
// been processed all along. A duplicate is a message handled successfully: the right
// handler acks it.
func FailingDuplicates(handle consumer.Handler) consumer.Handler {
	return func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		outcome, err := handle(ctx, env)
		if err == nil && outcome == inbox.Duplicate {
			return 0, fmt.Errorf("message %s: %w", env.ID, ErrDuplicate)
		}
		return outcome, err
	}
}

// SeenCache is a set of message ids held in the process's memory, as a cache (Redis,
// memcached, a map) holds dedup keys. SetIfAbsent is one atomic step, so two copies at
// once cannot both pass it; what it cannot do is remember: its keys are lost when the
// process restarts, evicted when it is full, forgotten when they expire, and none of that
// is in the transaction of the work.
type SeenCache struct {
	mu   sync.Mutex
	seen map[string]bool
}

// NewSeenCache returns an empty cache, as a process starts with.
func NewSeenCache() *SeenCache { return &SeenCache{seen: map[string]bool{}} }

// SetIfAbsent adds key and reports whether it was absent.
func (c *SeenCache) SetIfAbsent(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[key] {
		return false
	}
	c.seen[key] = true
	return true
}

// Delete forgets key.
func (c *SeenCache) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, key)
}

// CheckedInCache wraps handle behind cache: a message whose id the cache holds is skipped
// as a duplicate without reaching handle, and an id the cache did not hold is set before
// handle runs and deleted again if handle fails, so that the redelivery is handled. In
// front of a handler that dedups by itself (stock's inbox) it is an optimisation that
// saves the database a transaction per duplicate; in front of one that does not (naive)
// it is the only guard, and every key the cache forgets lets a redelivery be applied
// twice.
func CheckedInCache(cache *SeenCache, handle consumer.Handler) consumer.Handler {
	return func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		if !cache.SetIfAbsent(env.ID) {
			return inbox.Duplicate, nil
		}
		outcome, err := handle(ctx, env)
		if err != nil {
			cache.Delete(env.ID)
		}
		return outcome, err
	}
}
