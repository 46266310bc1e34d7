package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// OrderEvents returns where the order's events stand in ordering's outbox: each was
// written in the transaction that placed the order (created_at) and is published once the
// relay has had the broker's confirm (published_at). ErrNotFound for an unknown order.
// The storefront shows it as the first two steps of an order's journey.
func (s *Service) OrderEvents(ctx context.Context, id uuid.UUID) ([]outbox.AggregateEvent, error) {
	if _, err := store.New(s.pool).GetOrder(ctx, id); errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	} else if err != nil {
		return nil, fmt.Errorf("get order: %w", err)
	}
	return outbox.ForAggregate(ctx, s.pool, "order", id.String())
}
