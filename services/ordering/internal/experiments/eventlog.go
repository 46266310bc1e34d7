package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
)

// eventState is the state of an event-log row, as eShopOnContainers' EventStateEnum
// numbers it.
type eventState int

const (
	notPublished eventState = iota
	inProgress
	published
	publishedFailed
)

func (s eventState) String() string {
	switch s {
	case notPublished:
		return "NotPublished"
	case inProgress:
		return "InProgress"
	case published:
		return "Published"
	case publishedFailed:
		return "PublishedFailed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// eventLogTable is eShopOnContainers' IntegrationEventLog, in Postgres: the row is written
// in the order's transaction, which it records, like an outbox row; unlike one, nothing
// but the request that wrote it ever reads it again.
const eventLogTable = `
CREATE TABLE IF NOT EXISTS integration_event_log (
    event_id       uuid        PRIMARY KEY,
    event_type     text        NOT NULL,
    content        json        NOT NULL,
    state          int         NOT NULL,
    times_sent     int         NOT NULL DEFAULT 0,
    creation_time  timestamptz NOT NULL DEFAULT clock_timestamp(),
    transaction_id text        NOT NULL DEFAULT pg_current_xact_id()::text
)`

// eventLogInline is eShopOnContainers' way, as wrongways.Events: InTx adds the event to
// the log in the order's transaction (NotPublished); once the transaction has committed,
// Committed publishes that transaction's NotPublished events inline, each marked
// InProgress, then Published or PublishedFailed. There is no background sender: an event
// whose publish failed is never sent again.
type eventLogInline struct {
	pool *pgxpool.Pool
	pub  *broker.Publisher
	err  error // what Committed met: the publish's error, or nil
}

func (w *eventLogInline) InTx(ctx context.Context, tx pgx.Tx, env event.Envelope) error {
	content, err := json.Marshal(env)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO integration_event_log (event_id, event_type, content, state) VALUES ($1, $2, $3, $4)",
		env.UUID(), env.Type, content, int(notPublished))
	return err
}

// Committed records what the inline publish met in err, for the experiment to read.
func (w *eventLogInline) Committed(ctx context.Context, env event.Envelope) error {
	w.err = w.publishEventsOfTransaction(ctx, env)
	return w.err
}

// publishEventsOfTransaction is eShop's PublishEventsThroughEventBusAsync: the pending
// events of the transaction that wrote env, published one by one.
func (w *eventLogInline) publishEventsOfTransaction(ctx context.Context, env event.Envelope) error {
	rows, err := w.pool.Query(ctx, `
		SELECT event_id::text, event_type, content::text, creation_time FROM integration_event_log
		WHERE state = $2
		  AND transaction_id = (SELECT transaction_id FROM integration_event_log WHERE event_id = $1)
		ORDER BY creation_time`, env.UUID(), int(notPublished))
	if err != nil {
		return err
	}
	type pending struct {
		id, typ, content string
		created          time.Time
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (pending, error) {
		var p pending
		return p, row.Scan(&p.id, &p.typ, &p.content, &p.created)
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range evs {
		if err := w.mark(ctx, p.id, inProgress); err != nil {
			return err
		}
		msg := broker.Message{RoutingKey: p.typ, Publishing: broker.EventPublishing(p.id, p.typ, "ordering", p.created, []byte(p.content))}
		state := published
		if err := w.pub.PublishBatch(ctx, []broker.Message{msg})[0]; err != nil {
			state = publishedFailed
			errs = append(errs, err)
		}
		if err := w.mark(ctx, p.id, state); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// mark sets an event's state; InProgress counts a send, as eShop's does.
func (w *eventLogInline) mark(ctx context.Context, id string, s eventState) error {
	_, err := w.pool.Exec(ctx, `
		UPDATE integration_event_log SET state = $2::int, times_sent = times_sent + CASE WHEN $2::int = $3::int THEN 1 ELSE 0 END
		WHERE event_id = $1::uuid`, id, int(s), int(inProgress))
	return err
}

// EventLogResult is the measurement of EventLogInlinePublish.
type EventLogResult struct {
	State     string        // the first order's event-log row, at the end
	TimesSent int           // its times_sent
	Age       time.Duration // how long it has been in the log, unsent
	Orders    int           // orders in the database
	Published int           // events that reached the queue
	// StuckCopies is how many of those are the first order's event.
	StuckCopies int
}

func (r EventLogResult) String() string {
	row := "event-log row stuck"
	if r.State == published.String() {
		row = "event-log row sent"
	}
	return fmt.Sprintf("[event-log inline] publish fails, no background sender -> %s: %s, times sent: %d, age: %v; "+
		"with the broker back, events published: %s, the stuck one's: %s %s",
		row, r.State, r.TimesSent, r.Age.Round(time.Millisecond), wanted(r.Published, r.Orders), wanted(r.StuckCopies, 1),
		verdict(r.Published == r.Orders && r.StuckCopies == 1, "the first order's event never sent"))
}

// EventLogInlinePublish: eShopOnContainers' integration event log. Ada's order commits
// with its event-log row, and the inline publish after the commit fails: the broker
// cannot be reached. The broker comes back and the next order's event is published, but
// the publish only ever looks at its own transaction's events, and nothing else reads the
// log: Ada's row stays PublishedFailed, and her order pending.
func (l *Lab) EventLogInlinePublish(ctx context.Context) (EventLogResult, error) {
	oneAtATime.Lock()
	defer oneAtATime.Unlock()
	var r EventLogResult
	if err := l.reset(ctx); err != nil {
		return r, err
	}
	if _, err := l.Pool.Exec(ctx, eventLogTable); err != nil {
		return r, fmt.Errorf("event log: %w", err)
	}
	if _, err := l.Pool.Exec(ctx, "TRUNCATE integration_event_log"); err != nil {
		return r, fmt.Errorf("event log: %w", err)
	}

	downURL, stopDown, err := unreachableBroker(l.AMQPURL)
	if err != nil {
		return r, err
	}
	defer stopDown()
	pubDown, closeDown := newPublisher(downURL)
	defer closeDown()
	first := &eventLogInline{pool: l.Pool, pub: pubDown}
	ada, err := l.placeOrder(ctx, first)
	if err != nil {
		return r, fmt.Errorf("place the first order: %w", err)
	}
	if !broker.Unavailable(first.err) {
		return r, fmt.Errorf("event log: want the first inline publish to find the broker unreachable, got %v", first.err)
	}

	pubUp, closeUp := newPublisher(l.AMQPURL)
	defer closeUp()
	next := &eventLogInline{pool: l.Pool, pub: pubUp}
	if _, err := l.placeOrder(ctx, next); err != nil {
		return r, fmt.Errorf("place the next order: %w", err)
	}
	if next.err != nil {
		return r, fmt.Errorf("event log: the next order's inline publish: %w", next.err)
	}

	var state int
	var seconds float64
	err = l.Pool.QueryRow(ctx, `
		SELECT state, times_sent, extract(epoch FROM clock_timestamp() - creation_time)::float8
		FROM integration_event_log WHERE content->>'subject' = $1`, ada.Order.ID.String()).Scan(&state, &r.TimesSent, &seconds)
	if err != nil {
		return r, fmt.Errorf("read the first order's event-log row: %w", err)
	}
	r.State, r.Age = eventState(state).String(), time.Duration(seconds*float64(time.Second))
	if r.Orders, err = l.count(ctx, "SELECT count(*) FROM orders"); err != nil {
		return r, err
	}
	copies, err := l.copies(ctx)
	if err != nil {
		return r, err
	}
	r.Published = len(copies)
	for _, c := range copies {
		id, err := orderOf(c)
		if err != nil {
			return r, err
		}
		if id == ada.Order.ID.String() {
			r.StuckCopies++
		}
	}
	return r, nil
}

// unreachableBroker listens on a local port and hangs up on every connection: to a
// publisher, a broker it cannot reach. It returns amqpURL pointed there; stop closes it.
func unreachableBroker(amqpURL string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	e, err := broker.ParseEndpoints(amqpURL)
	if err != nil {
		_ = ln.Close()
		return "", nil, err
	}
	// Every node of a cluster replaced: a publisher must reach none of them.
	return e.WithHosts(ln.Addr().String()).String(), func() { _ = ln.Close() }, nil
}
