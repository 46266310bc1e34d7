package stock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
)

// ErrNoAnswer is returned by Reservation for an order inventory has not answered: its
// event has not arrived yet, or the order does not exist.
var ErrNoAnswer = errors.New("order not answered")

// Reservation is inventory's answer to one order, as GET /orders/{id}/reservation shows
// it: the outcome and when it was committed (in the same transaction as the inbox row
// that claimed the order's event), the lines reserved (none when rejected), and where
// the outcome event stands in inventory's outbox.
type Reservation struct {
	OrderID    uuid.UUID               `json:"order_id"`
	Outcome    string                  `json:"outcome"` // reserved or rejected
	AnsweredAt time.Time               `json:"answered_at"`
	Lines      []OrderLine             `json:"lines"`
	Events     []outbox.AggregateEvent `json:"events"`
}

// OrderLine is one book reserved for an order.
type OrderLine struct {
	BookID   uuid.UUID `json:"book_id"`
	Quantity int       `json:"quantity"`
}

// Reservation reads the answer to one order, read-only, from one snapshot.
func (s *Service) Reservation(ctx context.Context, orderID uuid.UUID) (Reservation, error) {
	var out Reservation
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := store.New(tx)
		answer, err := q.GetOrderAnswer(ctx, orderID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoAnswer
		}
		if err != nil {
			return fmt.Errorf("get order answer: %w", err)
		}
		rows, err := q.ListOrderReservations(ctx, orderID)
		if err != nil {
			return fmt.Errorf("list reservations: %w", err)
		}
		events, err := outbox.ForAggregate(ctx, tx, AggregateType, orderID.String())
		if err != nil {
			return err
		}
		out = Reservation{OrderID: answer.OrderID, Outcome: answer.Outcome,
			AnsweredAt: answer.AnsweredAt.UTC(), Lines: make([]OrderLine, len(rows)), Events: events}
		for i, r := range rows {
			out.Lines[i] = OrderLine{BookID: r.BookID, Quantity: int(r.Quantity)}
		}
		return nil
	})
	return out, err
}
