package notifications

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/notification/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
)

// errNotAllNew: some email of the batch has a record already. The batch rolls back and
// its events are handled one at a time, where HandleStockEvent decides for each record
// by its state.
var errNotAllNew = errors.New("an email of the batch has a record already")

// errCancellationAlone: a cancellation email may have to wait for its order's
// confirmation (waitForConfirmation), which HandleStockEvent decides one event at a time.
var errCancellationAlone = errors.New("a cancellation email is handled alone")

// HandleStockEvents is HandleStockEvent for events that arrived together, in the common
// case where every email is new: phase one for all of them in one transaction (inbox
// rows, records, claims), then every send at once, then phase two for all of them in one
// statement. Anything else returns an error: an existing record before any send, or a send that did
// not complete. The consumer then hands each event to HandleStockEvent, which finds the
// completed records duplicates and reconciles the rest, so no email is sent twice.
func (s *Service) HandleStockEvents(ctx context.Context, msgs []inbox.Message) ([]inbox.Outcome, error) {
	envs := make([]event.Envelope, len(msgs))
	var create store.CreateNotificationsParams
	for i, m := range msgs {
		e, err := emailFor(m.Envelope)
		if err != nil {
			return nil, err
		}
		if e.kind == OrderCancelled {
			return nil, errCancellationAlone
		}
		envs[i] = m.Envelope
		create.OrderIds = append(create.OrderIds, e.orderID)
		create.Kinds = append(create.Kinds, string(e.kind))
		create.IdempotencyKeys = append(create.IdempotencyKeys, IdempotencyKey(e.orderID, e.kind))
		create.Recipients = append(create.Recipients, e.message.To)
		create.Subjects = append(create.Subjects, e.message.Subject)
		create.Bodies = append(create.Bodies, e.message.Text)
		create.EventIds = append(create.EventIds, m.Envelope.UUID())
	}

	// Phase one: when this commits, every key is on disk before any request leaves.
	var recs []store.Notification
	err := inbox.ProcessAll(ctx, s.pool, ConsumerName, envs, func(tx pgx.Tx) error {
		q := store.New(tx)
		if n, err := q.CreateNotifications(ctx, create); err != nil || n != int64(len(msgs)) {
			return cmp.Or(err, errNotAllNew)
		}
		var err error
		recs, err = q.ClaimNotifications(ctx, store.ClaimNotificationsParams{
			ClaimToken:   uuid.NullUUID{UUID: uuid.New(), Valid: true},
			LeaseSeconds: s.cfg.Lease.Seconds(),
			OrderIds:     create.OrderIds,
			Kinds:        create.Kinds,
		})
		if err == nil && len(recs) != len(msgs) {
			err = errNotAllNew
		}
		return err
	})
	if err != nil {
		return nil, err
	}

	// The sends, each in the trace of its own event.
	spans := make(map[string]trace.SpanContext, len(msgs))
	for i, m := range msgs {
		spans[create.IdempotencyKeys[i]] = m.Span
	}
	emailIDs, errs := make([]string, len(recs)), make([]error, len(recs))
	var wg sync.WaitGroup
	for i, rec := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			emailIDs[i], errs[i] = s.deliver(trace.ContextWithSpanContext(ctx, spans[rec.IdempotencyKey]), rec, "redelivery")
		}()
	}
	wg.Wait()
	// Phase two for every email the provider has, whatever happened to the others: those
	// are sent, and a record left 'processing' would be reconciled later for nothing.
	if err := s.completeAll(ctx, recs, emailIDs); err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Repeat([]inbox.Outcome{inbox.Processed}, len(msgs)), nil
}
