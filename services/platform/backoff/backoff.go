// Package backoff spaces out retries. It closes the retry storm after an outage: when
// Postgres or RabbitMQ comes back, every relay loop, consumer and outbox row that failed
// together would otherwise retry together, in one burst that can knock the dependency
// over again. Delays grow exponentially with each failed attempt, up to a ceiling, and
// each is jittered so that the retries of many callers spread out.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay is the wait before retry number attempt (1 for the first retry): base doubled for
// each attempt after the first, capped at maxDelay, then jittered to a random point in
// [d/2, d]. Half the delay is kept so that a retry never comes sooner than half its
// step; the other half is random so that callers which failed together spread out.
func Delay(base, maxDelay time.Duration, attempt int) time.Duration {
	d := base << min(max(attempt-1, 0), 20)
	if d <= 0 || d > maxDelay { // the shift overflowed, or passed the ceiling
		d = maxDelay
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Sleep waits for d, or less if ctx ends first, and reports whether it waited the whole
// of d: false means the caller is being shut down and should stop retrying. A d of zero
// or less returns true at once.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
