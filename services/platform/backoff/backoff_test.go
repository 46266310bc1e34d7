package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
)

// Each delay lies in [d/2, d] for d = base·2^(attempt-1) capped at max, and the jitter
// really spreads the delays out.
func TestDelayStaysWithinItsStep(t *testing.T) {
	t.Parallel()
	const base, maxDelay = 100 * time.Millisecond, 10 * time.Second
	for _, c := range []struct {
		attempt int
		step    time.Duration
	}{
		{0, base}, // treated as the first retry
		{1, base},
		{2, 2 * base},
		{3, 4 * base},
		{7, 64 * base},
		{8, maxDelay}, // 12.8 s, capped
		{40, maxDelay},
		{1000, maxDelay}, // the shift is bounded; no overflow to a negative delay
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := backoff.Delay(base, maxDelay, c.attempt)
			if d < c.step/2 || d > c.step {
				t.Fatalf("Delay(attempt %d) = %v, want within [%v, %v]", c.attempt, d, c.step/2, c.step)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("attempt %d: only %d distinct delays in 200 draws: no jitter", c.attempt, len(seen))
		}
	}
}

func TestSleepWaitsOrStopsWithItsContext(t *testing.T) {
	t.Parallel()
	began := time.Now()
	if !backoff.Sleep(context.Background(), 20*time.Millisecond) {
		t.Fatal("Sleep with a live context reported an interruption")
	}
	if took := time.Since(began); took < 20*time.Millisecond {
		t.Fatalf("Sleep(20ms) returned after %v", took)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if backoff.Sleep(ctx, time.Hour) {
		t.Fatal("Sleep with an ended context reported a full wait")
	}

	if !backoff.Sleep(ctx, 0) {
		t.Fatal("Sleep(0) reported an interruption")
	}
}
