package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/ordering/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// OrderEvents returns where the order's events stand in ordering's outbox: each was
// written in the transaction that placed the order (created_at) and is published once the
// relay has had the broker's confirm (published_at). ErrNotFound for an unknown order.
// The storefront shows it as the first two steps of an order's journey.
func (s *Service) OrderEvents(ctx context.Context, id uuid.UUID) (events []outbox.AggregateEvent, err error) {
	err = s.read(ctx, func(conn *pgxpool.Conn) error {
		if _, err := store.New(conn).GetOrder(ctx, id); errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return fmt.Errorf("get order: %w", err)
		}
		events, err = outbox.ForAggregate(ctx, conn, "order", id.String())
		return err
	})
	return events, err
}
