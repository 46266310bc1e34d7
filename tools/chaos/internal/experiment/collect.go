package experiment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/faults"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/report"
)

// waitQuiet polls until nothing is left to do, or until the only thing left is orders
// that nothing will ever decide (their events are lost: nothing is queued or unpublished
// for them) and that has not changed for stable, or until timeout. The management API's
// queue counts lag by a few seconds, so "drained" must hold on polls that far apart.
func waitQuiet(ctx context.Context, sys *harness.System, timeout time.Duration) report.Quiet {
	const stable = 15 * time.Second
	start := time.Now()
	var q report.Quiet
	var drainedSince time.Time
	lastPending := -1
	for {
		b, err := readBacklog(ctx, sys)
		q.Last, q.Waited = b, time.Since(start)
		switch {
		case err != nil:
			drainedSince = time.Time{}
		case !b.Drained() || b.Pending != lastPending:
			drainedSince = time.Time{}
		case drainedSince.IsZero():
			drainedSince = time.Now()
		case b.Pending == 0 && time.Since(drainedSince) >= 6*time.Second:
			q.Reached, q.Reason = true, "outboxes drained, queues empty, every order decided, every email record finished"
			return q
		case time.Since(drainedSince) >= stable:
			q.Reached, q.Reason = true, fmt.Sprintf("outboxes drained and queues empty for %v; %d orders pending with nothing left that could decide them", stable, b.Pending)
			return q
		}
		lastPending = b.Pending
		if time.Since(start) > timeout || !harness.Sleep(ctx, time.Second) {
			q.Reason = fmt.Sprintf("not quiet after %v: %+v (last error: %v)", timeout, b, err)
			return q
		}
	}
}

func readBacklog(ctx context.Context, sys *harness.System) (report.Backlog, error) {
	var b report.Backlog
	for _, svc := range []string{"ordering", "inventory"} {
		o, err := outboxState(ctx, sys, svc)
		if err != nil {
			return b, err
		}
		b.Outbox += o.Pending
	}
	queues, err := queueDepths(ctx, sys)
	if err != nil {
		return b, err
	}
	for _, q := range queues {
		b.Queued += q.Messages
		if q.Missing {
			b.Queued++ // a missing queue is work that cannot finish: never quiet
		}
	}
	if err := sys.DBs["ordering"].QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'pending'`).Scan(&b.Pending); err != nil {
		return b, fmt.Errorf("count pending orders: %w", err)
	}
	// notification's own table (sql/notification): the records its sweeper still owes.
	err = sys.DBs["notification"].QueryRow(ctx,
		`SELECT count(*) FROM notifications WHERE status IN ('processing', 'needs-reconciliation')`).Scan(&b.Notifications)
	if err != nil {
		return b, fmt.Errorf("count unfinished notifications: %w", err)
	}
	return b, nil
}

// outboxState counts a service's unpublished outbox rows (the platform's outbox table).
func outboxState(ctx context.Context, sys *harness.System, service string) (check.Outbox, error) {
	o := check.Outbox{Service: service}
	err := sys.DBs[service].QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'dead') FROM outbox`).Scan(&o.Pending, &o.Dead)
	if err != nil {
		return o, fmt.Errorf("%s outbox: %w", service, err)
	}
	return o, nil
}

// queueDepths reads each work queue's messages, ready and unacked, from the management API.
func queueDepths(ctx context.Context, sys *harness.System) ([]check.Queue, error) {
	var out []check.Queue
	for _, q := range contracts.Topology.Queues {
		var info struct {
			Messages int `json:"messages"`
		}
		err := sys.Management().Do(ctx, "GET", "/api/queues/"+url.PathEscape(sys.Vhost)+"/"+url.PathEscape(q.Name), "", &info)
		if errors.Is(err, broker.ErrNotFound) {
			// Deleted by a queue fault and never declared again: its consumer gets nothing.
			out = append(out, check.Queue{Name: q.Name, Missing: true})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q.Name, err)
		}
		out = append(out, check.Queue{Name: q.Name, Messages: info.Messages})
	}
	return out, nil
}

// collect fills a snapshot from the real system: the ordering database (orders, lines,
// idempotency keys), the APIs of the contracts (books, notification records, the
// provider's emails), both outboxes, the queues and, last, the dead-letter queues, which
// it empties.
//
// With bulk (the soak, whose hundreds of thousands of orders would take hours at a
// request each), the notification records and the emails are read from the
// notification's and the provider's databases in one query each instead, and the
// contracts' read APIs are asked for a random sample of the orders (bulkSample), whose
// answers must be exactly what the databases gave: the same records, so the checks on
// them are the normal run's.
func collect(ctx context.Context, sys *harness.System, msgs *faults.Messages, history []check.ClientOp, bulk bool) (check.Snapshot, error) {
	s := check.Snapshot{History: history, InjectedPoison: msgs.InjectedPoison()}
	var err error
	if s.Orders, err = collectOrders(ctx, sys); err != nil {
		return s, err
	}
	inv := sys.ProcessesOf("inventory")[0]
	if s.Books, err = harness.GetAll[check.Book](ctx, "http://"+inv.HTTPAddr+"/books"); err != nil {
		return s, fmt.Errorf("books: %w", err)
	}
	// Every address a client used or an order holds: the emails sent to them.
	addresses := map[string]bool{}
	for _, op := range history {
		addresses[op.Email] = true
	}
	for _, o := range s.Orders {
		addresses[o.CustomerEmail] = true
	}
	if bulk {
		if s.Notifications, s.Emails, err = readOutcomesInBulk(ctx, sys, s.Orders, addresses); err != nil {
			return s, err
		}
		if err := sampleAgrees(ctx, sys, s, sys.Cfg.Seed); err != nil {
			return s, err
		}
	} else if s.Notifications, s.Emails, err = readOutcomes(ctx, sys, s.Orders, addresses); err != nil {
		return s, err
	}

	for _, svc := range []string{"ordering", "inventory"} {
		o, err := outboxState(ctx, sys, svc)
		if err != nil {
			return s, err
		}
		s.Outboxes = append(s.Outboxes, o)
	}
	if s.Queues, err = queueDepths(ctx, sys); err != nil {
		return s, err
	}
	if s.DeadLetters, err = msgs.DrainDeadLetters(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// readOutcomes asks the contracts' read APIs for each order's notification records and
// each address's emails: one request per order and per address, eight at a time.
func readOutcomes(ctx context.Context, sys *harness.System, orders []check.Order, addresses map[string]bool) ([]check.NotificationRecord, []check.SentEmail, error) {
	var mu sync.Mutex
	var notes []check.NotificationRecord
	var emails []check.SentEmail
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	notification := sys.ProcessesOf("notification")[0]
	for _, o := range orders {
		g.Go(func() error {
			recs, err := harness.GetAll[check.NotificationRecord](gctx, "http://"+notification.HTTPAddr+"/notifications?order_id="+o.ID.String())
			if err != nil {
				return fmt.Errorf("notifications of %s: %w", o.ID, err)
			}
			mu.Lock()
			notes = append(notes, recs...)
			mu.Unlock()
			return nil
		})
	}
	provider := sys.Process("emailprovider")
	for addr := range addresses {
		g.Go(func() error {
			got, err := harness.GetAll[check.SentEmail](gctx, "http://"+provider.HTTPAddr+"/v1/emails?to="+url.QueryEscape(addr))
			if err != nil {
				return fmt.Errorf("emails to %s: %w", addr, err)
			}
			mu.Lock()
			emails = append(emails, got...)
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	return notes, emails, err
}

// readOutcomesInBulk reads what readOutcomes asks the APIs for from the databases behind
// them, a query each: the notification records of the orders, and the emails the
// provider's account of the run (harness.ProviderAccount) sent to the addresses.
func readOutcomesInBulk(ctx context.Context, sys *harness.System, orders []check.Order, addresses map[string]bool) ([]check.NotificationRecord, []check.SentEmail, error) {
	ids := map[uuid.UUID]bool{}
	for _, o := range orders {
		ids[o.ID] = true
	}
	rows, err := sys.DBs["notification"].Query(ctx, `SELECT order_id, kind, status, idempotency_key, attempts FROM notifications`)
	if err != nil {
		return nil, nil, fmt.Errorf("read notification records: %w", err)
	}
	var notes []check.NotificationRecord
	var n check.NotificationRecord
	_, err = pgx.ForEachRow(rows, []any{&n.OrderID, &n.Kind, &n.Status, &n.IdempotencyKey, &n.Attempts}, func() error {
		if ids[n.OrderID] {
			notes = append(notes, n)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read notification records: %w", err)
	}
	rows, err = sys.DBs["emailprovider"].Query(ctx, `
		SELECT id::text, idempotency_key, recipient, subject, deliveries, created_at
		FROM emails WHERE account = $1 ORDER BY recipient, created_at, id`, harness.ProviderAccount)
	if err != nil {
		return nil, nil, fmt.Errorf("read emails: %w", err)
	}
	var emails []check.SentEmail
	var e check.SentEmail
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.IdempotencyKey, &e.To, &e.Subject, &e.Deliveries, &e.CreatedAt}, func() error {
		if addresses[e.To] {
			e.CreatedAt = e.CreatedAt.UTC()
			emails = append(emails, e)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read emails: %w", err)
	}
	return notes, emails, nil
}

// bulkSample is how many orders collect's bulk read checks against the APIs.
const bulkSample = 500

// sampleAgrees asks the contracts' read APIs for the notification records and emails of
// bulkSample orders drawn with seed, and returns an error unless they are exactly the
// records of those orders and addresses in s.
func sampleAgrees(ctx context.Context, sys *harness.System, s check.Snapshot, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x62756c6b)) // "bulk"
	orders := slices.Clone(s.Orders)
	rng.Shuffle(len(orders), func(i, j int) { orders[i], orders[j] = orders[j], orders[i] })
	orders = orders[:min(bulkSample, len(orders))]
	ids, addresses := map[uuid.UUID]bool{}, map[string]bool{}
	for _, o := range orders {
		ids[o.ID], addresses[o.CustomerEmail] = true, true
	}
	apiNotes, apiEmails, err := readOutcomes(ctx, sys, orders, addresses)
	if err != nil {
		return fmt.Errorf("the APIs' sample: %w", err)
	}
	var dbNotes []check.NotificationRecord
	for _, n := range s.Notifications {
		if ids[n.OrderID] {
			dbNotes = append(dbNotes, n)
		}
	}
	var dbEmails []check.SentEmail
	for _, e := range s.Emails {
		if addresses[e.To] {
			dbEmails = append(dbEmails, e)
		}
	}
	byNote := func(a, b check.NotificationRecord) int {
		return cmp.Or(strings.Compare(a.OrderID.String(), b.OrderID.String()), strings.Compare(a.Kind, b.Kind))
	}
	byEmail := func(a, b check.SentEmail) int { return strings.Compare(a.ID, b.ID) }
	for _, l := range [][]check.NotificationRecord{apiNotes, dbNotes} {
		slices.SortFunc(l, byNote)
	}
	for _, l := range [][]check.SentEmail{apiEmails, dbEmails} {
		slices.SortFunc(l, byEmail)
	}
	if !slices.Equal(apiNotes, dbNotes) {
		return fmt.Errorf("the notification records of %d sampled orders: the API lists %d, the database holds %d, and they differ (%s)", len(orders), len(apiNotes), len(dbNotes), firstDiff(apiNotes, dbNotes))
	}
	if !slices.EqualFunc(apiEmails, dbEmails, func(a, b check.SentEmail) bool { return a.ID == b.ID && sameEmail(a, b) }) {
		return fmt.Errorf("the emails to %d sampled addresses: the API lists %d, the database holds %d, and they differ (%s)", len(addresses), len(apiEmails), len(dbEmails), firstDiff(apiEmails, dbEmails))
	}
	return nil
}

// sameEmail compares two readings of one email, its time to the microsecond the API
// gives.
func sameEmail(a, b check.SentEmail) bool {
	a.CreatedAt, b.CreatedAt = a.CreatedAt.Truncate(time.Microsecond), b.CreatedAt.Truncate(time.Microsecond)
	return a.CreatedAt.Equal(b.CreatedAt) && a.IdempotencyKey == b.IdempotencyKey && a.To == b.To && a.Subject == b.Subject && a.Deliveries == b.Deliveries
}

// firstDiff describes the first position where two sorted readings differ.
func firstDiff[T any](api, db []T) string {
	for i := range max(len(api), len(db)) {
		var a, d any = "nothing", "nothing"
		if i < len(api) {
			a = api[i]
		}
		if i < len(db) {
			d = db[i]
		}
		if fmt.Sprint(a) != fmt.Sprint(d) {
			return fmt.Sprintf("the API's %+v, the database's %+v", a, d)
		}
	}
	return "the same records"
}

func collectOrders(ctx context.Context, sys *harness.System) ([]check.Order, error) {
	db := sys.DBs["ordering"]
	rows, err := db.Query(ctx, `
		SELECT o.id, coalesce(k.key, ''), o.customer_email, o.status, o.created_at, o.updated_at
		FROM orders o LEFT JOIN idempotency_keys k ON k.order_id = o.id ORDER BY o.created_at`)
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	orders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (check.Order, error) {
		var o check.Order
		return o, r.Scan(&o.ID, &o.Key, &o.CustomerEmail, &o.Status, &o.CreatedAt, &o.UpdatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	rows, err = db.Query(ctx, `SELECT order_id, book_id, quantity FROM order_lines`)
	if err != nil {
		return nil, fmt.Errorf("read order lines: %w", err)
	}
	lines := map[uuid.UUID][]check.OrderLine{}
	var id uuid.UUID
	var l check.OrderLine
	_, err = pgx.ForEachRow(rows, []any{&id, &l.BookID, &l.Quantity}, func() error {
		lines[id] = append(lines[id], l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read order lines: %w", err)
	}
	for i := range orders {
		orders[i].Lines = lines[orders[i].ID]
	}
	return orders, nil
}
