package notifications

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/notification/internal/store"
)

// sweepBatch is how many stale records one sweep takes up at most.
const sweepBatch = 100

// Sweep reconciles records left 'processing' or 'needs-reconciliation' for longer than
// ReconcileAfter. It closes the last window: a record whose message will never come back
// (acked by a buggy consumer, purged from the queue, dead-lettered by the broker's
// delivery limit) would otherwise stay unfinished forever. Records held by a live claim
// are left alone; two sweepers on two instances claim each record once between them.
// It returns how many records it completed.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	stale, err := store.New(s.pool).ListStaleNotifications(ctx, store.ListStaleNotificationsParams{
		StaleSeconds: s.cfg.ReconcileAfter.Seconds(),
		BatchSize:    sweepBatch,
	})
	if err != nil {
		return 0, fmt.Errorf("list stale notifications: %w", err)
	}
	completed := 0
	for _, r := range stale {
		rec, claimed, err := s.claim(ctx, r.OrderID, Kind(r.Kind))
		if err != nil {
			return completed, err
		}
		if !claimed {
			continue // a redelivery got there first
		}
		// Each sweep of a record is its own trace root: no request started it.
		actx, span := s.tracer.Start(ctx, "notification sweep", trace.WithNewRoot())
		err = s.attempt(actx, rec, "sweeper")
		span.End()
		var failed *FailedError
		switch {
		case err == nil:
			completed++
			s.m.swept.Add(ctx, 1, metric.WithAttributes(attribute.String("result", "completed")))
		case errors.As(err, &failed):
			s.m.swept.Add(ctx, 1, metric.WithAttributes(attribute.String("result", "failed")))
		default:
			s.m.swept.Add(ctx, 1, metric.WithAttributes(attribute.String("result", "retry")))
			s.log.WarnContext(ctx, "sweeper could not finish a record; it will try again", "idempotency_key", rec.IdempotencyKey, "err", err)
		}
	}
	return completed, nil
}

// RunSweeper calls Sweep every SweepInterval until ctx ends.
func (s *Service) RunSweeper(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := s.Sweep(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "sweep failed", "err", err)
			}
			if n > 0 {
				s.log.InfoContext(ctx, "sweeper completed stale notifications", "completed", n)
			}
		}
	}
}
