package notifications

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/notification/internal/provider"
	"github.com/bookstore-go/bookstore/services/notification/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// ConsumerName is notification's name as a consumer (metric label).
const ConsumerName = "notification"

// StockEventTypes are the events HandleStockEvent handles.
var StockEventTypes = []string{contracts.StockReserved, contracts.StockRejected, contracts.StockReleased}

// ReasonNotificationFailed is the poison reason of a message whose email has failed for
// good: it goes to the DLQ for an operator, with the record saying why.
const ReasonNotificationFailed = "notification-failed"

// Config tunes the retries and the sweeper.
type Config struct {
	// MaxAttempts is how many times a record may be claimed to talk to the provider
	// before it fails for good.
	MaxAttempts int
	// Lease is how long a claim keeps others from calling the provider for the same key.
	// It must outlast one attempt (a lookup and a send, each bounded by the provider
	// timeout); after it anyone may take over, so a crashed holder blocks no one for long.
	Lease time.Duration
	// ReconcileAfter is how long a record may sit unfinished and untouched before the
	// sweeper reconciles it, redelivery or not.
	ReconcileAfter time.Duration
	// SweepInterval is how often the sweeper looks.
	SweepInterval time.Duration
}

// Service runs the notification use cases.
type Service struct {
	pool     *pgxpool.Pool
	provider *provider.Client
	cfg      Config
	log      *slog.Logger
	tracer   trace.Tracer
	m        metrics
}

// NewService returns the notification use cases.
func NewService(pool *pgxpool.Pool, client *provider.Client, cfg Config, tel *telemetry.Telemetry) (*Service, error) {
	m, err := newMetrics(tel.Meter("notifications"))
	if err != nil {
		return nil, err
	}
	return &Service{
		pool: pool, provider: client, cfg: cfg,
		log:    tel.Logger.With("component", "notifications"),
		tracer: tel.Tracer("notifications"),
		m:      m,
	}, nil
}

// HandleStockEvent sends the email a stock event asks for. It is the consumer's handler:
// nil means ack, a poison error dead-letters, any other error requeues after a backoff.
//
//   - No record yet: create it 'processing' and claim it in one commit, then send.
//   - 'completed': the email is out; ack as a duplicate (a redelivery, or the same
//     outcome published again under a new message id).
//   - 'processing' or 'needs-reconciliation', not claimed: an earlier attempt died or
//     timed out; claim it and reconcile (ask the provider, send only if it says 404).
//   - claimed by someone else right now: requeue and look again later; only one
//     attempt talks to the provider for a key at a time.
//   - 'failed': dead-letter, as the first message for it was.
func (s *Service) HandleStockEvent(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	e, err := emailFor(env)
	if err != nil {
		return 0, err
	}
	if err := s.waitForConfirmation(ctx, e); err != nil {
		return 0, err
	}
	rec, claimed, err := s.createAndClaim(ctx, e, env)
	if err != nil {
		return 0, err
	}
	if !claimed {
		switch Status(rec.Status) {
		case Completed:
			return inbox.Duplicate, nil
		case Failed:
			return 0, event.Poison(ReasonNotificationFailed, fmt.Errorf("email %s failed earlier after %d attempts: %s",
				rec.IdempotencyKey, rec.Attempts, deref(rec.LastError)))
		default:
			// Held by a live attempt (or released a moment ago): look again after a backoff.
			return 0, fmt.Errorf("email %s is %s and claimed by another attempt; retrying later", rec.IdempotencyKey, rec.Status)
		}
	}
	err = s.attempt(ctx, rec, "redelivery")
	var failed *FailedError
	if errors.As(err, &failed) {
		return 0, event.Poison(ReasonNotificationFailed, err)
	}
	if err != nil {
		return 0, err
	}
	return inbox.Processed, nil
}

// ErrConfirmationFirst: a cancellation email waits for the confirmation email of its
// order. The consumer requeues the event after its backoff.
var ErrConfirmationFirst = errors.New("the order's confirmation email is not sent yet")

// waitForConfirmation keeps an order's cancellation email from going out before its
// confirmation email, when both are due: inventory publishes the order's StockReserved
// before its StockReleased (one aggregate, in sequence order), but notification's
// workers may take them the other way round, or the confirmation may be waiting for the
// provider. Until the order's order-confirmed record is completed (or failed for good:
// then nothing is left to wait for), the cancellation creates no record and is requeued;
// each wait spends one of its deliveries, counted in
// bookstore_notification_deferred_total. A cancellation whose order had nothing
// reserved (rejected, or cancelled before inventory saw it) has no confirmation to wait
// for.
func (s *Service) waitForConfirmation(ctx context.Context, e email) error {
	if e.kind != OrderCancelled || !e.afterConfirmation {
		return nil
	}
	rec, err := store.New(s.pool).GetNotification(ctx, store.GetNotificationParams{OrderID: e.orderID, Kind: string(OrderConfirmed)})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("get confirmation record: %w", err)
	case Status(rec.Status) == Completed || Status(rec.Status) == Failed:
		return nil
	}
	s.m.deferred.Add(ctx, 1)
	return fmt.Errorf("cancellation email of order %s: %w", e.orderID, ErrConfirmationFirst)
}

// createAndClaim is phase one: one transaction that creates the record if it is missing
// and claims it. When it commits, the key is on disk before any request leaves, so no
// crash afterwards can lead to an email sent under a key nobody remembers. It returns the
// record and whether this caller now holds the claim.
func (s *Service) createAndClaim(ctx context.Context, e email, env event.Envelope) (rec store.Notification, claimed bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The inbox row is only here to recognise a message id reused with different
		// content, which the contracts dead-letter: the record below, not the inbox,
		// decides whether to send, so a redelivery of the same message (the inbox says
		// "seen") must still go on to reconcile a record a crash left unfinished.
		if _, err := inbox.Claim(ctx, tx, ConsumerName, env); err != nil {
			return err
		}
		q := store.New(tx)
		err := q.CreateNotification(ctx, store.CreateNotificationParams{
			OrderID: e.orderID, Kind: string(e.kind), IdempotencyKey: IdempotencyKey(e.orderID, e.kind),
			Recipient: e.message.To, Subject: e.message.Subject, Body: e.message.Text, EventID: env.UUID(),
		})
		if err != nil {
			return fmt.Errorf("create notification: %w", err)
		}
		rec, claimed, err = s.claimIn(ctx, q, e.orderID, e.kind)
		return err
	})
	return rec, claimed, err
}

// claim takes an existing record for one attempt, as the sweeper does.
func (s *Service) claim(ctx context.Context, orderID uuid.UUID, kind Kind) (store.Notification, bool, error) {
	return s.claimIn(ctx, store.New(s.pool), orderID, kind)
}

func (s *Service) claimIn(ctx context.Context, q *store.Queries, orderID uuid.UUID, kind Kind) (store.Notification, bool, error) {
	rec, err := q.ClaimNotification(ctx, store.ClaimNotificationParams{
		OrderID: orderID, Kind: string(kind),
		ClaimToken:   uuid.NullUUID{UUID: uuid.New(), Valid: true},
		LeaseSeconds: s.cfg.Lease.Seconds(),
	})
	if err == nil {
		return rec, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return rec, false, fmt.Errorf("claim notification: %w", err)
	}
	rec, err = q.GetNotification(ctx, store.GetNotificationParams{OrderID: orderID, Kind: string(kind)})
	if err != nil {
		return rec, false, fmt.Errorf("get notification: %w", err)
	}
	return rec, false, nil
}

// ErrKeyHoldsAnotherEmail: reconciliation found an email under the record's key that is
// not the record's (another recipient or another content). The record fails for good.
var ErrKeyHoldsAnotherEmail = errors.New("the provider holds another email under this key")

// ours reports whether the email a lookup found is the one m describes: the same
// recipient and the same content hash. An answer without a hash is not ours.
func ours(found provider.Accepted, m provider.Message) bool {
	return found.To == m.To && found.ContentSHA256 == m.ContentHash()
}

// FailedError says a record has failed for good.
type FailedError struct {
	Key      string
	Attempts int
	Cause    error
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("email %s failed after %d attempts: %v", e.Key, e.Attempts, e.Cause)
}
func (e *FailedError) Unwrap() error { return e.Cause }

// attempt is one claimed try at getting the email to the provider: the call, which no
// transaction can hold, then phase two. It returns nil once the record is 'completed', a
// *FailedError once it is 'failed', and any other error when the outcome is still open
// (the record then waits as 'needs-reconciliation' for the next delivery or the sweeper).
func (s *Service) attempt(ctx context.Context, rec store.Notification, trigger string) error {
	emailID, err := s.deliver(ctx, rec, trigger)
	if err != nil {
		return err
	}
	return s.complete(ctx, rec, emailID)
}

// deliver is an attempt up to phase two: it asks the provider first when an earlier
// claim may have sent the email, and sends when it has not. It returns the provider's id
// of the email once the provider has it; the record still says 'processing' then, and
// the caller completes it (complete, or completeAll for a batch). Any other outcome it
// records itself (release) and returns as attempt does.
func (s *Service) deliver(ctx context.Context, rec store.Notification, trigger string) (emailID string, err error) {
	key := rec.IdempotencyKey
	ctx, span := s.tracer.Start(ctx, "notification attempt", trace.WithAttributes(
		attribute.String("bookstore.idempotency_key", key),
		attribute.Int("bookstore.attempt", int(rec.Attempts)),
		attribute.String("bookstore.trigger", trigger)))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	msg := provider.Message{To: rec.Recipient, Subject: rec.Subject, Text: rec.Body}

	// Attempts counts claims, this one included. Any earlier claim may have reached the
	// provider before its holder died or timed out, so ask before sending. (Sending
	// straight away would be safe too, thanks to the key; asking is what keeps it safe
	// with a provider whose keys expire, and it tells the metrics what happened.)
	if rec.Attempts > 1 {
		acc, found, err := s.provider.Lookup(ctx, key)
		switch {
		case err != nil:
			s.m.reconciled.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "error"), attribute.String("trigger", trigger)))
			return "", s.release(ctx, rec, err)
		case found && !ours(acc, msg):
			// Someone else's email under our key: a leaked API key, or another client of
			// our account using our key space. Ours was not sent (the provider would refuse
			// it under this key), and sending it under another key could send it twice if
			// the stranger was us after all; an operator decides. The record fails and its
			// message is dead-lettered, counted as outcome "mismatch".
			s.m.reconciled.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "mismatch"), attribute.String("trigger", trigger)))
			err := fmt.Errorf("%w: the provider holds email %s to %q with content_sha256 %s; this record's is to %q with %s",
				ErrKeyHoldsAnotherEmail, acc.ID, acc.To, acc.ContentSHA256, msg.To, msg.ContentHash())
			s.log.ErrorContext(ctx, "reconciled: the provider holds another email under our key; not taken as sent", "idempotency_key", key, "err", err)
			return "", s.release(ctx, rec, err)
		case found:
			s.m.reconciled.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "found"), attribute.String("trigger", trigger)))
			s.log.InfoContext(ctx, "reconciled: the provider had the email", "idempotency_key", key, "attempt", rec.Attempts)
			return acc.ID, nil
		default:
			s.m.reconciled.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "not-found"), attribute.String("trigger", trigger)))
			s.log.InfoContext(ctx, "reconciled: the provider never got the email; sending", "idempotency_key", key, "attempt", rec.Attempts)
		}
	}

	acc, err := s.provider.Send(ctx, key, msg)
	if err != nil {
		return "", s.release(ctx, rec, err)
	}
	if acc.Replayed {
		s.m.replayed.Add(ctx, 1)
	} else {
		s.m.sent.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", rec.Kind)))
	}
	// The provider has the email; the record still says 'processing'. A crash here is
	// the window of this whole design: the redelivery (or the sweeper) will ask the
	// provider, find the email and complete the record, never send it again.
	if err := failpoint.Inject(ctx, contracts.NotificationAfterSend); err != nil {
		return "", s.release(ctx, rec, err)
	}
	return acc.ID, nil
}

// complete is phase two. It writes with a context that outlives the caller's
// cancellation: the provider has the email, so recording that is always worth finishing.
func (s *Service) complete(ctx context.Context, rec store.Notification, emailID string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := store.New(s.pool).CompleteNotification(ctx, store.CompleteNotificationParams{
		OrderID: rec.OrderID, Kind: rec.Kind, ProviderEmailID: &emailID,
	})
	if err != nil {
		// The record stays 'processing' until the lease runs out; then the next attempt
		// reconciles and finds the email.
		return fmt.Errorf("complete notification %s: %w", rec.IdempotencyKey, err)
	}
	return nil
}

// completeAll is phase two for the emails of a batch, in one statement: complete for
// every record whose emailIDs entry is set, the others left as deliver recorded them. A
// failure leaves every one of them 'processing', as a failed complete leaves one.
func (s *Service) completeAll(ctx context.Context, recs []store.Notification, emailIDs []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var done store.CompleteNotificationsParams
	for i, rec := range recs {
		if emailIDs[i] == "" {
			continue
		}
		done.OrderIds = append(done.OrderIds, rec.OrderID)
		done.Kinds = append(done.Kinds, rec.Kind)
		done.ProviderEmailIds = append(done.ProviderEmailIds, emailIDs[i])
	}
	if len(done.OrderIds) == 0 {
		return nil
	}
	if _, err := store.New(s.pool).CompleteNotifications(ctx, done); err != nil {
		return fmt.Errorf("complete %d notifications: %w", len(done.OrderIds), err)
	}
	return nil
}

// release ends an attempt whose outcome is unknown (or a refusal): the record becomes
// 'needs-reconciliation', or 'failed' when its attempts are used up or the provider
// refused the request itself.
func (s *Service) release(ctx context.Context, rec store.Notification, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	msg := cause.Error()
	row, err := store.New(s.pool).ReleaseNotification(ctx, store.ReleaseNotificationParams{
		OrderID: rec.OrderID, Kind: rec.Kind, ClaimToken: rec.ClaimToken,
		GiveUp:      errors.Is(cause, provider.ErrRejected) || errors.Is(cause, ErrKeyHoldsAnotherEmail),
		MaxAttempts: int32(s.cfg.MaxAttempts),
		LastError:   &msg,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// Our lease ran out and someone else took over (or completed it): their state wins.
		return fmt.Errorf("email %s: claim lost while the attempt failed: %w", rec.IdempotencyKey, cause)
	}
	if err != nil {
		return fmt.Errorf("release notification %s: %w (attempt failed: %v)", rec.IdempotencyKey, err, cause)
	}
	if Status(row.Status) == Failed {
		s.m.failed.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", rec.Kind)))
		s.log.ErrorContext(ctx, "email failed for good", "idempotency_key", rec.IdempotencyKey, "attempts", row.Attempts, "err", cause)
		return &FailedError{Key: rec.IdempotencyKey, Attempts: int(row.Attempts), Cause: cause}
	}
	return fmt.Errorf("email %s, attempt %d of %d: %w", rec.IdempotencyKey, row.Attempts, s.cfg.MaxAttempts, cause)
}

// ForOrder returns at most limit of an order's notification records in kind order, those
// after the kind after (from the first when it is nil).
func (s *Service) ForOrder(ctx context.Context, orderID uuid.UUID, after *Kind, limit int) ([]Notification, error) {
	params := store.ListNotificationsByOrderParams{OrderID: orderID, MaxRows: int32(limit)}
	if after != nil {
		params.AfterKind = (*string)(after)
	}
	rows, err := store.New(s.pool).ListNotificationsByOrder(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	out := make([]Notification, len(rows))
	for i, r := range rows {
		out[i] = Notification{
			OrderID: r.OrderID, Kind: Kind(r.Kind), Status: Status(r.Status), IdempotencyKey: r.IdempotencyKey,
			Attempts: int(r.Attempts), UpdatedAt: r.UpdatedAt.UTC().Truncate(time.Microsecond),
		}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

type metrics struct {
	sent, replayed, reconciled, failed, swept, deferred metric.Int64Counter
}

func newMetrics(m metric.Meter) (metrics, error) {
	var out metrics
	in := telemetry.NewInstruments(m)
	out.sent = in.Counter("bookstore.notification.sent", "Emails the provider accepted and sent on our request, by kind.")
	out.replayed = in.Counter("bookstore.notification.replayed_by_provider", "Sends the provider answered from its Idempotency-Key record: sent before, not again.")
	out.reconciled = in.Counter("bookstore.notification.reconciled", "Reconciliation lookups at the provider, by outcome (found, not-found, mismatch: another email under our key, error) and trigger.")
	out.failed = in.Counter("bookstore.notification.failed", "Records that failed for good, by kind.")
	out.deferred = in.Counter("bookstore.notification.deferred", "Cancellation emails requeued because the order's confirmation email was not sent yet.")
	out.swept = in.Counter("bookstore.notification.swept", "Stale records the sweeper took up, by result.")
	if err := in.Err("notification"); err != nil {
		return out, err
	}
	// A counter appears on /metrics only once it has counted. The ones that should stay at
	// zero are exported at zero from the start, so a dashboard shows "none" instead of
	// "no data", and an alert on them has a series to watch.
	ctx := context.Background()
	out.replayed.Add(ctx, 0)
	out.deferred.Add(ctx, 0)
	for _, kind := range []Kind{OrderConfirmed, OrderRejected, OrderCancelled} {
		out.failed.Add(ctx, 0, metric.WithAttributes(attribute.String("kind", string(kind))))
	}
	return out, nil
}
