// Package emails is the email provider's domain: a stand-in for a third-party email API
// such as Postmark or Stripe's idempotency keys. It closes the provider's half of the
// "email cannot join a transaction" failure: a caller that cannot know whether its request
// got through (a timeout, a crash) may send it again with the same Idempotency-Key, and the
// email is still sent once. Send records the email and its response in the transaction
// that sends it, under an advisory lock on the key; Get answers the reconciliation query
// "did you send key K?".
//
// It also plays the flaky third party on request (faults.go): refusing, stalling after
// sending, or being slow, so the notification service's reconciliation is exercised.
package emails

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/emailprovider/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// StatusSent is the only status an email the provider knows has: it was sent.
const StatusSent = "sent"

// Limits of a request.
const (
	MaxSubjectLen = 998 // RFC 5322's line limit
	MaxTextLen    = 32 << 10
)

// Request is the body of POST /v1/emails.
type Request struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

// Valid returns a problem per invalid field; empty when valid.
func (r Request) Valid() map[string]string {
	problems := map[string]string{}
	switch {
	case r.To == "":
		problems["to"] = "is required"
	default:
		if p := addressProblem(r.To); p != "" {
			problems["to"] = p
		}
	}
	switch {
	case r.Subject == "":
		problems["subject"] = "is required"
	case len(r.Subject) > MaxSubjectLen:
		problems["subject"] = fmt.Sprintf("must be at most %d characters", MaxSubjectLen)
	case bytes.ContainsAny([]byte(r.Subject), "\r\n"):
		problems["subject"] = "must be one line"
	}
	switch {
	case r.Text == "":
		problems["text"] = "is required"
	case len(r.Text) > MaxTextLen:
		problems["text"] = fmt.Sprintf("must be at most %d bytes", MaxTextLen)
	}
	return problems
}

// Email is the response of POST /v1/emails.
type Email struct {
	ID             uuid.UUID `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
}

// Delivered is an email as the GET forms show it: with its recipient, subject, the hash
// of its content (contentHash), by which a caller reconciling a key
// tells the email it meant from another, and how many times it was actually delivered.
type Delivered struct {
	Email
	To            string `json:"to"`
	Subject       string `json:"subject"`
	ContentSHA256 string `json:"content_sha256"`
	Deliveries    int    `json:"deliveries"`
}

// Sent is the outcome of Send.
type Sent struct {
	Body     []byte // the 202 body; for a replay, the first response's bytes
	Replayed bool   // true when the key had already sent this email: nothing was sent now
}

// Errors of the use cases, mapped to HTTP statuses by the API.
var (
	ErrNotFound = errors.New("no email was sent with this Idempotency-Key")
	// ErrKeyInFlight: another request with this key is being sent right now.
	ErrKeyInFlight = idempotency.ErrInFlight
	// ErrKeyMismatch: the key was used before with a different request.
	ErrKeyMismatch = idempotency.ErrMismatch
	// ErrUnavailable: the fail_rate fault fired; nothing was sent.
	ErrUnavailable = errors.New("the provider is unavailable (injected fault); nothing was sent")
	// ErrRecipientRefused: the refuse_to fault names the recipient; nothing was sent.
	ErrRecipientRefused = errors.New("the provider refuses every email to this recipient (injected fault); nothing was sent")
)

// Forwarder hands a sent email on to a real mail server (Mailpit in docker compose).
type Forwarder interface {
	Forward(ctx context.Context, key string, req Request) error
}

// Service runs the provider's use cases against its database.
type Service struct {
	pool    *pgxpool.Pool
	faults  *Faults
	forward Forwarder  // nil: emails are only recorded
	group   *committer // nil: every send commits alone
	log     *slog.Logger
	tracer  trace.Tracer
	m       metrics
}

// NewService returns the provider. forward may be nil. groupCommit is the most emails one
// transaction sends (group.go); 1 sends each in a transaction of its own.
func NewService(pool *pgxpool.Pool, faults *Faults, forward Forwarder, groupCommit int, log *slog.Logger, tracer trace.Tracer, meter metric.Meter) (*Service, error) {
	m, err := newMetrics(meter)
	if err != nil {
		return nil, err
	}
	s := &Service{pool: pool, faults: faults, forward: forward, log: log, tracer: tracer, m: m}
	if groupCommit > 1 {
		s.group = &committer{s: s, max: groupCommit}
	}
	return s, nil
}

// Send sends req once per key of the account. key must be non-empty; account is the
// caller the API authenticated, whose keys no other account can take or see.
//
// The order of statements is what makes it exactly once (sendAlone):
//  1. idempotency.Do looks the key up: an email already sent is replayed (or
//     ErrKeyMismatch), not re-sent. Otherwise it locks the key: a concurrent request with
//     the same key gets ErrKeyInFlight; it can neither send a second time nor answer "not
//     sent" while the first is still sending.
//  2. Send, which here means recording the delivery (deliveries = 1) with the response.
//  3. Commit. A crash before it leaves no row and sent nothing; the caller's retry sends.
//
// The ambiguous fault strikes only after step 3: the email is sent and the caller never
// hears so. That is the window the caller's reconciliation must close.
//
// Under load, sends that arrive while another commits share the next transaction (the
// group commit of group.go), with the same steps and answers; a slow send (the latency
// fault) always goes alone.
func (s *Service) Send(ctx context.Context, account, key string, req Request) (Sent, error) {
	ctx, span := s.tracer.Start(ctx, "SendEmail transaction")
	defer span.End()

	if s.faults.Get().Refuses(req.To) {
		s.m.faults.Add(ctx, 1, metric.WithAttributes(attribute.String("fault", "refuse_to")))
		return Sent{}, ErrRecipientRefused
	}
	roll := s.faults.roll()
	if roll.fail {
		s.m.faults.Add(ctx, 1, metric.WithAttributes(attribute.String("fault", "fail")))
		return Sent{}, ErrUnavailable
	}
	hash, err := idempotency.Hash(req)
	if err != nil {
		return Sent{}, err
	}
	e := outgoing{account: account, key: key, hash: hash, req: req}
	var sent Sent
	if s.group != nil && roll.latency == 0 {
		sent, err = s.group.send(ctx, e)
	} else {
		sent, err = s.sendAlone(ctx, e, roll.latency)
	}
	if err != nil {
		return Sent{}, err
	}
	span.SetAttributes(attribute.Bool("bookstore.replayed", sent.Replayed))
	if sent.Replayed {
		s.m.replays.Add(ctx, 1)
	} else {
		s.m.sent.Add(ctx, 1)
		s.forwardEmail(ctx, key, req)
	}
	if roll.ambiguous {
		s.m.faults.Add(ctx, 1, metric.WithAttributes(attribute.String("fault", "ambiguous")))
		s.log.InfoContext(ctx, "ambiguous fault: email sent, stalling the response", "idempotency_key", key)
		if err := s.faults.stall(ctx); err != nil {
			return Sent{}, err // the caller gave up: it cannot know the email went out
		}
	}
	return sent, nil
}

// outgoing is one email to send: the request of an account under its key, and the
// request's hash (idempotency.Hash).
type outgoing struct {
	account, key string
	hash         []byte
	req          Request
}

// scope is the idempotency scope of an account's keys.
func scope(account string) string { return "emailprovider/emails/" + account }

// sendAlone is Send's transaction for one email, steps 1 to 3; the send takes latency
// while it holds the key.
func (s *Service) sendAlone(ctx context.Context, e outgoing, latency time.Duration) (Sent, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Sent{}, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	q := store.New(tx)
	lookup := func(db *idempotency.LookupDB) (idempotency.Stored, error) {
		prev, err := store.New(db).GetEmailByKey(ctx, store.GetEmailByKeyParams{Account: e.account, IdempotencyKey: e.key})
		return idempotency.Stored{RequestHash: prev.RequestHash, Response: prev.ResponseBody}, err
	}
	send := func() ([]byte, error) {
		// A slow send is slow while it holds the key: a retry arriving meanwhile is told
		// the first is still in flight, as a real provider would.
		if !backoff.Sleep(ctx, latency) {
			return nil, ctx.Err()
		}
		row, err := e.record()
		if err != nil {
			return nil, err
		}
		err = q.InsertEmail(ctx, store.InsertEmailParams{
			ID: row.ID, Account: row.Account, IdempotencyKey: row.IdempotencyKey, RequestHash: row.RequestHash, Recipient: row.Recipient,
			Subject: row.Subject, Body: row.Body, ResponseBody: row.ResponseBody, CreatedAt: row.CreatedAt,
		})
		if err != nil {
			return nil, fmt.Errorf("record email: %w", err)
		}
		return row.ResponseBody, nil
	}
	res, err := idempotency.Do(ctx, tx, idempotency.Key{Scope: scope(e.account), Key: e.key, RequestHash: e.hash}, lookup, send)
	if err == nil {
		// The commit is not cut short when the caller gives up. A COMMIT interrupted by a
		// cancelled context may have committed all the same: the email recorded as sent,
		// and found by the caller's reconciliation, but never counted or forwarded here.
		// Once the email is written, the provider finishes what it started, as a real
		// one would.
		err = tx.Commit(context.WithoutCancel(ctx))
	}
	if err != nil {
		return Sent{}, err
	}
	return Sent{Body: res.Response, Replayed: res.Replayed}, nil
}

// record is the row that records e as sent now, with the 202 body it is answered with.
func (e outgoing) record() (store.Email, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return store.Email{}, err
	}
	email := Email{ID: id, IdempotencyKey: e.key, Status: StatusSent, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	body, err := json.Marshal(email)
	if err != nil {
		return store.Email{}, err
	}
	return store.Email{
		ID: id, Account: e.account, IdempotencyKey: e.key, RequestHash: e.hash, Recipient: e.req.To,
		Subject: e.req.Subject, Body: e.req.Text, Deliveries: 1, ResponseBody: body, CreatedAt: email.CreatedAt,
	}, nil
}

// forwardEmail passes a committed email on to the SMTP server. The record is already
// committed and stays the truth: a failure to forward is logged and counted, never
// undone, and a crash before forwarding loses only the copy in Mailpit.
func (s *Service) forwardEmail(ctx context.Context, key string, req Request) {
	if s.forward == nil {
		return
	}
	if err := s.forward.Forward(ctx, key, req); err != nil {
		s.m.forwardFailures.Add(ctx, 1)
		s.log.WarnContext(ctx, "forwarding over smtp failed; the email stays recorded as sent", "idempotency_key", key, "err", err)
	}
}

// Get answers the reconciliation query: the email the account sent under key, or
// ErrNotFound.
func (s *Service) Get(ctx context.Context, account, key string) (Delivered, error) {
	if !backoff.Sleep(ctx, s.faults.roll().latency) {
		return Delivered{}, ctx.Err()
	}
	row, err := store.New(s.pool).GetEmailByKey(ctx, store.GetEmailByKeyParams{Account: account, IdempotencyKey: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivered{}, ErrNotFound
	}
	if err != nil {
		return Delivered{}, fmt.Errorf("get email: %w", err)
	}
	return delivered(row), nil
}

// Cursor is the sort key of ListByRecipient, the position of an email in the list: an
// email's created_at, and its id among the emails of the same microsecond.
type Cursor struct {
	CreatedAt time.Time `json:"created_at"`
	ID        uuid.UUID `json:"id"`
}

// CursorOf is the position of an email in ListByRecipient.
func CursorOf(e Delivered) Cursor { return Cursor{CreatedAt: e.CreatedAt, ID: e.ID} }

// Known reports whether c could be an email's position: a cursor with no time or
// no id is not one the API wrote.
func (c Cursor) Known() bool { return !c.CreatedAt.IsZero() && c.ID != uuid.Nil }

// ListByRecipient returns at most limit emails the account sent to an address, oldest
// first, those after the cursor after (from the first when it is nil).
func (s *Service) ListByRecipient(ctx context.Context, account, to string, after *Cursor, limit int) ([]Delivered, error) {
	if !backoff.Sleep(ctx, s.faults.roll().latency) {
		return nil, ctx.Err()
	}
	params := store.ListEmailsByRecipientParams{Account: account, Recipient: to, MaxRows: int32(limit)}
	if after != nil {
		params.AfterCreatedAt = &after.CreatedAt
		params.AfterID = uuid.NullUUID{UUID: after.ID, Valid: true}
	}
	rows, err := store.New(s.pool).ListEmailsByRecipient(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("list emails: %w", err)
	}
	out := make([]Delivered, len(rows))
	for i, r := range rows {
		out[i] = delivered(r)
	}
	return out, nil
}

func delivered(r store.Email) Delivered {
	return Delivered{
		Email: Email{
			ID: r.ID, IdempotencyKey: r.IdempotencyKey, Status: StatusSent,
			CreatedAt: r.CreatedAt.UTC().Truncate(time.Microsecond),
		},
		To:            r.Recipient,
		Subject:       r.Subject,
		ContentSHA256: contentHash(r.Subject, r.Body),
		Deliveries:    int(r.Deliveries),
	}
}

type metrics struct {
	sent, replays, faults, forwardFailures, groupFallbacks metric.Int64Counter
	groupSize                                              metric.Int64Histogram
}

func newMetrics(m metric.Meter) (metrics, error) {
	var out metrics
	in := telemetry.NewInstruments(m)
	out.sent = in.Counter("bookstore.emailprovider.sent", "Emails sent: first requests of their Idempotency-Key.")
	out.replays = in.Counter("bookstore.emailprovider.replays", "Requests answered from a key's stored response, sending nothing.")
	out.faults = in.Counter("bookstore.emailprovider.faults", "Injected faults that fired, by fault.")
	out.forwardFailures = in.Counter("bookstore.emailprovider.smtp_failures", "Sent emails that could not be forwarded over SMTP.")
	out.groupSize = in.Int64Histogram("bookstore.emailprovider.group_commit_size", "Sends committed together in one group transaction (two or more).",
		metric.WithExplicitBucketBoundaries(2, 4, 8, 16, 32, 64))
	out.groupFallbacks = in.Counter("bookstore.emailprovider.group_commit_fallbacks", "Group transactions that failed, their emails then sent one at a time.")
	if err := in.Err("emailprovider"); err != nil {
		return out, err
	}
	return out, nil
}
