package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// Messages is the harness's own hand on the broker, straight to the run's vhost: it
// publishes duplicates of real events and poison messages, remembers exactly which poison
// it injected, and empties the dead-letter queues for the checker.
type Messages struct {
	sys *harness.System

	mu       sync.Mutex
	conn     *amqp.Connection
	ch       *amqp.Channel
	returns  chan amqp.Return // the channel's returned mandatory publishes
	rng      *rand.Rand
	injected []check.PoisonMessage
	altered  map[string]bool // events already sent altered: each is altered once
}

// NewMessages returns a messages for sys; it connects on first use.
func NewMessages(sys *harness.System, seed uint64) *Messages {
	return &Messages{sys: sys, rng: rand.New(rand.NewPCG(seed, 0x6d7367)), altered: map[string]bool{}} // "msg"
}

// channel returns the confirm-mode channel, reconnecting after a broker restart.
func (m *Messages) channel() (*amqp.Channel, error) {
	if m.ch != nil && !m.ch.IsClosed() {
		return m.ch, nil
	}
	if m.conn == nil || m.conn.IsClosed() {
		// Every node in turn (the cluster profile's): one may be down.
		conn, err := broker.Dial(context.Background(), m.sys.AMQPURL, amqp.Config{Properties: amqp.Table{"connection_name": "chaos-harness"}})
		if err != nil {
			return nil, fmt.Errorf("harness broker connection: %w", err)
		}
		m.conn = conn
	}
	ch, err := m.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	m.returns = ch.NotifyReturn(make(chan amqp.Return, 16))
	m.ch = ch
	return ch, nil
}

// errNoQueue: a message published straight to a queue came back unroutable, the queue
// missing (another fault deleted it and nobody declared it again).
var errNoQueue = errors.New("returned unroutable: the queue does not exist")

// publish publishes one message and waits for the broker's confirm. One published
// straight to a queue (exchange "") is mandatory: the broker drops a message to a queue
// that does not exist and confirms it all the same, so an injected message would count
// as in the queue when it never was; it comes back instead, and publish returns
// errNoQueue.
func (m *Messages) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, err := m.channel()
	if err != nil {
		return err
	}
	for len(m.returns) > 0 {
		<-m.returns // an earlier publish's, reported then
	}
	msg.DeliveryMode = amqp.Persistent
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	mandatory := exchange == ""
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, msg)
	if err != nil {
		m.ch = nil
		return fmt.Errorf("publish: %w", err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil || !ok {
		m.ch = nil
		return fmt.Errorf("publish not confirmed: %v", err)
	}
	// The broker sends a return before the confirm of the same message, and the channel
	// hands it on before it reads the confirm.
	select {
	case r := <-m.returns:
		return fmt.Errorf("%s to %s: %w (%d %s)", r.MessageId, key, errNoQueue, r.ReplyCode, r.ReplyText)
	default:
	}
	return nil
}

// duplicate publishes events already published by service's outbox again, each copies
// times back to back, with the same id: what a relay that crashed after the broker's ack
// and before marking the row does, and what the broker's own redelivery does. Copies sent
// back to back reach the two competing inventory consumers at the same moment, which is
// where "check, then process" lets both through.
func (m *Messages) duplicate(ctx context.Context, service string, events, copies int) (int, error) {
	rows, err := m.sys.DBs[service].Query(ctx,
		`SELECT id::text, event_type, envelope::text FROM outbox WHERE state = 'published' ORDER BY published_at DESC LIMIT 50`)
	if err != nil {
		return 0, fmt.Errorf("read %s outbox: %w", service, err)
	}
	type row struct{ id, typ, body string }
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.typ, &x.body)
	})
	if err != nil {
		return 0, fmt.Errorf("read %s outbox: %w", service, err)
	}
	if len(all) == 0 {
		return 0, fmt.Errorf("%s has published nothing yet", service)
	}
	m.mu.Lock()
	m.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	m.mu.Unlock()
	login, err := broker.ParseEndpoints(m.sys.AMQPURL)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range all[:min(events, len(all))] {
		for range copies {
			// As the producer's own copy: signed with the run's one broker user, which
			// every service logs in as and each consumer takes its events from.
			err := m.publish(ctx, contracts.Exchange, r.typ, amqp.Publishing{
				MessageId: r.id, Type: r.typ, ContentType: event.ContentType, AppId: service, Body: []byte(r.body),
				UserId: login.Login(),
			})
			if err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// queueType is the event type a work queue normally carries.
func queueType(queue string) string {
	if queue == contracts.QueueInventoryOrderPlaced {
		return contracts.OrderPlaced
	}
	return contracts.StockReserved
}

// poison publishes one poison message of kind straight into queue (through the default
// exchange, so no binding decides where it goes) and records it.
func (m *Messages) poison(ctx context.Context, queue, kind string) (check.PoisonMessage, error) {
	typ := queueType(queue)
	id := uuid.Must(uuid.NewV7()).String()
	var body []byte
	switch kind {
	case event.ReasonNotJSON:
		body = []byte(`{"specversion":"1.0","id":"` + id + `","type":"` + typ + `","data":{"order_id":`)
	case event.ReasonInvalidEnvelope:
		env := fakeEnvelope(id, typ)
		env["specversion"] = "0.3"
		body, _ = json.Marshal(env)
	case event.ReasonUnknownType:
		typ = typ[:len(typ)-len(".v1")] + ".v9"
		body, _ = json.Marshal(fakeEnvelope(id, typ))
	case event.ReasonContentMismatch:
		var err error
		if id, typ, body, err = m.alteredProcessedEvent(ctx, queue); err != nil {
			return check.PoisonMessage{}, err
		}
	default:
		return check.PoisonMessage{}, fmt.Errorf("unknown poison kind %q", kind)
	}
	p := check.PoisonMessage{Queue: queue, Kind: kind, MessageID: id, Body: body, At: time.Now()}
	err := m.publish(ctx, "", queue, amqp.Publishing{MessageId: id, Type: typ, ContentType: event.ContentType, AppId: "chaos", Body: body})
	if err != nil {
		return p, err
	}
	m.mu.Lock()
	m.injected = append(m.injected, p)
	m.mu.Unlock()
	return p, nil
}

func fakeEnvelope(id, typ string) map[string]any {
	order := uuid.Must(uuid.NewV7())
	return map[string]any{
		"specversion": "1.0", "id": id, "source": "bookstore/chaos", "type": typ,
		"subject": order.String(), "time": time.Now().UTC(), "datacontenttype": "application/json", "sequence": "1",
		"data": map[string]any{"order_id": order, "customer_email": "poison@chaos.example", "lines": []any{}},
	}
}

// alteredProcessedEvent takes an event that the queue's consumer has certainly processed
// already (its effect is visible) and changes its data, keeping its id: the same id with
// different content, which no retry can fix. Had the consumer not processed the original
// yet, the altered copy would be taken for the real event, so only settled ones qualify.
func (m *Messages) alteredProcessedEvent(ctx context.Context, queue string) (id, typ string, body []byte, err error) {
	var candidates []string // envelopes
	switch queue {
	case contracts.QueueInventoryOrderPlaced:
		// Confirmed or rejected: inventory answered it. Not merely "not pending": an order
		// cancelled while its placement waits in a backlog is not pending either, and the
		// load run found that placement taken for the poison's original: the altered copy
		// was reserved, and the real event dead-lettered as different content.
		candidates, err = collectStrings(ctx, m.sys.DBs["ordering"], `
			SELECT o.envelope::text FROM outbox o JOIN orders ord ON ord.id::text = o.aggregate_id
			WHERE o.state = 'published' AND ord.status IN ('confirmed', 'rejected')
			ORDER BY random() LIMIT 20`)
	default:
		var stock []string
		// Not the newest: under load the consumers run seconds behind the relay.
		stock, err = collectStrings(ctx, m.sys.DBs["inventory"], `
			SELECT envelope::text FROM outbox WHERE state = 'published' AND published_at < now() - interval '5 seconds'
			ORDER BY random() LIMIT 30`)
		for _, s := range stock {
			if m.settled(ctx, queue, s) {
				candidates = append(candidates, s)
				if len(candidates) == 3 {
					break
				}
			}
		}
	}
	if err != nil {
		return "", "", nil, err
	}
	var env map[string]any
	m.mu.Lock()
	m.rng.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	for _, raw := range candidates {
		var e map[string]any
		if json.Unmarshal([]byte(raw), &e) != nil {
			continue
		}
		if id, _ := e["id"].(string); !m.altered[queue+" "+id] {
			m.altered[queue+" "+id] = true
			env = e
			break
		}
	}
	m.mu.Unlock()
	if env == nil {
		return "", "", nil, errors.New("no processed event to alter yet")
	}
	data, _ := env["data"].(map[string]any)
	lines, _ := data["lines"].([]any)
	if len(lines) == 0 {
		return "", "", nil, errors.New("event without lines")
	}
	line, _ := lines[0].(map[string]any)
	q, _ := line["quantity"].(float64)
	line["quantity"] = float64(int(q)%100 + 1) // a different quantity, still valid
	body, err = json.Marshal(env)
	id, _ = env["id"].(string)
	typ, _ = env["type"].(string)
	return id, typ, body, err
}

// settled reports whether the stock event's consumer behind queue has processed it: for
// ordering the order is no longer pending, for notification its email record completed.
func (m *Messages) settled(ctx context.Context, queue, envelope string) bool {
	var env event.Envelope
	if json.Unmarshal([]byte(envelope), &env) != nil {
		return false
	}
	switch queue {
	case contracts.QueueOrderingStockEvents:
		var status string
		err := m.sys.DBs["ordering"].QueryRow(ctx, `SELECT status FROM orders WHERE id::text = $1`, env.Subject).Scan(&status)
		return err == nil && status != check.StatusPending
	case contracts.QueueNotificationStockEvents:
		p := m.sys.ProcessesOf("notification")[0]
		records, err := harness.GetAll[check.NotificationRecord](ctx, "http://"+p.HTTPAddr+"/notifications?order_id="+url.QueryEscape(env.Subject))
		if err != nil {
			return false
		}
		return slices.ContainsFunc(records, func(n check.NotificationRecord) bool { return n.Status == "completed" })
	}
	return false
}

func collectStrings(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string) ([]string, error) {
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// InjectedPoison returns the poison injected so far.
func (m *Messages) InjectedPoison() []check.PoisonMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.injected)
}

// DrainDeadLetters takes every message out of every dead-letter queue.
func (m *Messages) DrainDeadLetters(ctx context.Context) ([]check.DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, err := m.channel()
	if err != nil {
		return nil, err
	}
	var out []check.DeadLetter
	for _, q := range contracts.Topology.Queues {
		for {
			d, ok, err := ch.Get(q.DLQ(), false)
			if err != nil {
				m.ch = nil
				return out, fmt.Errorf("get from %s: %w", q.DLQ(), err)
			}
			if !ok {
				break
			}
			reason, _ := d.Headers["x-first-death-reason"].(string)
			out = append(out, check.DeadLetter{Queue: q.Name, MessageID: d.MessageId, Body: d.Body, Reason: reason, DeliveryCount: headerInt(d.Headers["x-delivery-count"])})
			if err := d.Ack(false); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// headerInt reads an AMQP header that holds an integer, of whichever width it came in.
func headerInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}

// Close closes the harness's broker connection.
func (m *Messages) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		_ = m.conn.Close()
	}
}
