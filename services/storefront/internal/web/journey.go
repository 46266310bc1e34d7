package web

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
)

// Step is one step of an order's journey as the page shows it.
type Step struct {
	Key    string     `json:"key"`
	Title  string     `json:"title"`
	State  string     `json:"state"` // waiting, done, rejected (done, with a rejection), failed, or skipped (never reached: the order was cancelled first)
	Detail string     `json:"detail"`
	At     *time.Time `json:"at,omitempty"`
	Source string     `json:"source"`          // the file that does it, a link into the repository
	Trace  string     `json:"trace,omitempty"` // its trace in Jaeger, when JAEGER_URL is set
}

// Journey is everything the page shows of one order: the placement's steps, then, once
// the order is cancelled, the cancellation's.
type Journey struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	// Done: nothing more will happen (the last email delivered, or given up), unless the
	// order is cancelled, which continues it.
	Done  bool   `json:"done"`
	Steps []Step `json:"steps"`
}

// stepInfo is what is fixed about each step of a placement: its title and the file that
// does it.
var stepInfo = []struct{ key, title, source string }{
	{"placed", "Order and its outbox row committed in one transaction (ordering)", "services/ordering/internal/orders/place.go"},
	{"published", "Event published to the broker by the outbox relay (ordering)", "services/platform/outbox/relay.go"},
	{"reserved", "Inbox row claimed, stock reserved or rejected, outcome written to the outbox (inventory)", "services/inventory/internal/stock/reserve.go"},
	{"announced", "Outcome event published by inventory's relay", "services/platform/outbox/relay.go"},
	{"applied", "Outcome applied to the order (ordering)", "services/ordering/internal/orders/outcome.go"},
	{"email", "Email record: processing, then completed (notification)", "services/notification/internal/notifications/handle.go"},
	{"delivered", "Email accepted by the provider under its idempotency key (emailprovider)", "services/emailprovider/internal/emails/emails.go"},
}

// cancelInfo is what is fixed about each step of a cancellation, the compensation that
// follows a placement once the order is cancelled (docs/cancellation.md): the same outbox
// and inbox at every hop, run backwards.
var cancelInfo = []struct{ key, title, source string }{
	{"cancelled", "Order cancelled and its outbox row committed in one transaction (ordering)", "services/ordering/internal/orders/cancel.go"},
	{"cancel-published", "order-cancelled published to the broker by the outbox relay (ordering)", "services/platform/outbox/relay.go"},
	{"released", "Inbox row claimed, the reservation released, stock-released written to the outbox (inventory)", "services/inventory/internal/stock/release.go"},
	{"release-announced", "stock-released published by inventory's relay", "services/platform/outbox/relay.go"},
	{"release-applied", "Release recorded in the order's history (ordering)", "services/ordering/internal/orders/outcome.go"},
	{"cancel-email", "Cancellation email record: processing, then completed (notification)", "services/notification/internal/notifications/handle.go"},
	{"cancel-delivered", "Cancellation email accepted by the provider under its own idempotency key (emailprovider)", "services/emailprovider/internal/emails/emails.go"},
}

// The event types and email kinds the journey tells apart.
const (
	cancelledType = "ordering.order-cancelled.v1"
	releasedType  = "inventory.stock-released.v1"
	cancelledKind = "order-cancelled"
)

// found is what the services answered about one order.
type found struct {
	order       Order
	events      []OutboxEvent // ordering's outbox rows of the order
	reservation *Reservation  // nil: inventory has not answered yet
	records     []Notification
	// emails by notification kind, for the records whose email the provider has
	emails map[string]*Email
}

// journey reads the order's journey from the services' public APIs: the order first,
// and only for an order ordering knows the rest, all at once. An id nobody placed then
// costs one request to ordering, not one to each service, each answered 404 and logged.
func (s *Server) journey(ctx context.Context, id string) (Journey, error) {
	var (
		f            = found{emails: map[string]*Email{}}
		errOptionals = make([]error, 3)
	)
	if err := s.api.get(ctx, s.api.urls.Ordering+"/orders/"+id, &f.order); err != nil {
		return Journey{}, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		errOptionals[0] = s.api.get(gctx, s.api.urls.Ordering+"/orders/"+id+"/events", &f.events)
		return nil
	})
	g.Go(func() error {
		var r Reservation
		err := s.api.get(gctx, s.api.urls.Inventory+"/orders/"+id+"/reservation", &r)
		if err == nil {
			f.reservation = &r
		} else if !errors.Is(err, errNotFound) {
			errOptionals[1] = err
		}
		return nil
	})
	g.Go(func() error {
		errOptionals[2] = s.api.get(gctx, s.api.urls.Notification+"/notifications?order_id="+id, &f.records)
		return nil
	})
	_ = g.Wait()
	if err := errors.Join(errOptionals...); err != nil {
		return Journey{}, err
	}
	for _, r := range f.records {
		if r.IdempotencyKey == "" {
			continue
		}
		var e Email
		err := s.api.get(ctx, s.api.emailURL(r.IdempotencyKey), &e)
		switch {
		case err == nil:
			f.emails[r.Kind] = &e
		case !errors.Is(err, errNotFound):
			return Journey{}, err
		}
	}
	return s.steps(f), nil
}

// steps turns what the services answered into the journey's steps: the placement's, and
// the cancellation's once the order is cancelled.
func (s *Server) steps(f found) Journey {
	order, res := f.order, f.reservation
	steps := make([]Step, len(stepInfo))
	for i, info := range stepInfo {
		steps[i] = Step{Key: info.key, Title: info.title, State: "waiting", Source: s.sourceURL + info.source}
	}
	sort.Slice(f.events, func(i, j int) bool { return f.events[i].CreatedAt.Before(f.events[j].CreatedAt) })
	var placed, cancelled *OutboxEvent
	for i := range f.events {
		switch {
		case f.events[i].Type == cancelledType:
			cancelled = &f.events[i]
		case placed == nil:
			placed = &f.events[i]
		}
	}
	traceID := ""
	if placed != nil {
		traceID = placed.TraceID
	}
	trace := s.traceLink(traceID)
	at := func(t time.Time) *time.Time { t = t.UTC(); return &t }
	history := map[string]time.Time{}
	for _, h := range order.History {
		history[h.Event] = h.At
	}
	_, isCancelled := history["cancelled"]
	isCancelled = isCancelled || order.Status == "cancelled"

	// placed: the order exists, so its row and its outbox row committed together.
	steps[0].State, steps[0].At, steps[0].Trace = "done", at(order.CreatedAt), trace
	steps[0].Detail = fmt.Sprintf("order %s, %d line(s)", order.ID, len(order.Lines))
	if placed != nil {
		steps[0].Detail += ", outbox row " + placed.ID + " (" + placed.Type + ")"
	}

	// published
	switch {
	case placed != nil && placed.State == "published" && placed.PublishedAt != nil:
		steps[1].State, steps[1].At, steps[1].Trace = "done", at(*placed.PublishedAt), trace
		steps[1].Detail = fmt.Sprintf("published %s after the commit", placed.PublishedAt.Sub(placed.CreatedAt).Round(time.Millisecond))
	case placed != nil && placed.State == "dead":
		steps[1].State, steps[1].Detail = "failed", fmt.Sprintf("parked as dead after %d attempts", placed.Attempts)
	case placed != nil:
		steps[1].Detail = fmt.Sprintf("pending in the outbox, %d failed attempt(s)", placed.Attempts)
	case order.Status != "pending":
		// The cleanup deleted the published row; the order's outcome shows it was published.
		steps[1].State, steps[1].Detail = "done", "published (its outbox row has since been cleaned up)"
	}

	// reserved and announced
	var outcome, release *OutboxEvent // inventory's outbox rows of its answer and of its release
	if res != nil {
		for i := range res.Events {
			if res.Events[i].Type == releasedType {
				release = &res.Events[i]
			} else if outcome == nil {
				outcome = &res.Events[i]
			}
		}
	}
	if res != nil {
		steps[2].State, steps[2].At, steps[2].Trace = "done", at(res.AnsweredAt), trace
		switch res.Outcome {
		case "rejected":
			steps[2].State, steps[2].Detail = "rejected", "not enough stock: nothing reserved, order rejected"
		case "cancelled":
			// The tombstone: the cancellation reached inventory before the placement.
			steps[2].State, steps[2].Detail = "skipped", "the cancellation reached inventory first: nothing reserved, ever"
		default:
			lines := res.Lines
			if len(lines) == 0 && isCancelled {
				lines = order.Lines // given back since: the reservation's lines are gone
			}
			n := copies(lines)
			steps[2].Detail = fmt.Sprintf("%d %s reserved", n, plural(n, "copy", "copies"))
			if len(res.Lines) == 0 && isCancelled {
				steps[2].Detail += " (released since)"
			}
		}
		switch {
		case outcome != nil:
			t := s.traceLink(outcome.TraceID)
			if t == "" {
				t = trace
			}
			if outcome.State == "published" && outcome.PublishedAt != nil {
				steps[3].State, steps[3].At, steps[3].Trace = "done", at(*outcome.PublishedAt), t
				steps[3].Detail = outcome.Type
			} else {
				steps[3].Detail = outcome.Type + " pending in inventory's outbox"
			}
		case res.Outcome == "cancelled":
			steps[3].State, steps[3].Detail = "skipped", "no outcome to announce: the order was cancelled first"
		case order.Status != "pending":
			steps[3].State, steps[3].Detail = "done", "published (its outbox row has since been cleaned up)"
		}
	}

	// applied: the outcome in the order's history (an outcome that arrives after the
	// cancellation changes nothing in ordering).
	for _, ev := range []string{"confirmed", "rejected"} {
		if t, ok := history[ev]; ok || order.Status == ev {
			if !ok {
				t = order.UpdatedAt
			}
			steps[4].State, steps[4].At, steps[4].Trace = "done", at(t), trace
			steps[4].Detail = "order " + ev
			if ev == "rejected" {
				steps[4].State = "rejected"
			}
		}
	}

	// email and delivered: the placement's record, order-confirmed or order-rejected.
	var record *Notification
	var cancelRecord *Notification
	for i := range f.records {
		if f.records[i].Kind == cancelledKind {
			cancelRecord = &f.records[i]
		} else if record == nil {
			record = &f.records[i]
		}
	}
	emailDone := s.emailSteps(steps[5:7], record, f.emails, trace)
	// Each service answers apart: the email can be delivered before ordering has applied
	// the outcome, or before a relay has recorded its broker's confirm, and a page that
	// stopped watching then would show a step waiting for ever.
	done := emailDone && order.Status != "pending" && settled(steps[1:4])

	if isCancelled {
		cancelSteps, cancelEmailDone := s.cancelSteps(f, history, cancelled, release, cancelRecord, trace)
		steps = append(steps, cancelSteps...)
		// Over once the second email is, every other step of the cancellation has
		// happened, and so has the placement's up to inventory's answer and its email
		// (which goes first, unless the cancellation came first and there is none).
		done = cancelEmailDone && settled(cancelSteps[:5]) && settled(steps[1:4]) &&
			(emailDone || (res != nil && res.Outcome == "cancelled"))
		if done {
			// What the placement never reached, it never will: the cancellation came first.
			for i := range stepInfo {
				if steps[i].State == "waiting" {
					steps[i].State, steps[i].Detail = "skipped", "not reached: the order was cancelled before this step"
				}
			}
		}
	}
	return Journey{OrderID: order.ID, Status: order.Status, Done: done, Steps: steps}
}

// emailSteps fills the two steps of one email, its record at notification and its copy
// at the provider, and says whether nothing more will happen to it.
func (s *Server) emailSteps(steps []Step, r *Notification, emails map[string]*Email, trace string) bool {
	at := func(t time.Time) *time.Time { t = t.UTC(); return &t }
	done := false
	if r != nil {
		steps[0].At, steps[0].Trace = at(r.UpdatedAt), trace
		steps[0].Detail = fmt.Sprintf("%s: %s after %d provider attempt(s)", r.Kind, r.Status, r.Attempts)
		switch r.Status {
		case "completed":
			steps[0].State = "done"
		case "failed":
			steps[0].State, done = "failed", true
		default:
			steps[0].Detail = fmt.Sprintf("%s: %s, %d provider attempt(s) so far", r.Kind, r.Status, r.Attempts)
		}
		if email := emails[r.Kind]; email != nil {
			steps[1].State, steps[1].At, steps[1].Trace = "done", at(email.CreatedAt), trace
			steps[1].Detail = fmt.Sprintf("%q to %s, delivered %d time(s)", email.Subject, email.To, email.Deliveries)
			if email.Deliveries != 1 {
				steps[1].State = "failed"
			}
			done = done || steps[0].State == "done"
		}
	}
	return done
}

// settled says whether none of steps is still waiting.
func settled(steps []Step) bool {
	for _, st := range steps {
		if st.State == "waiting" {
			return false
		}
	}
	return true
}

// cancelSteps are the cancellation's steps: ordering's cancel and its event, inventory's
// release and its event, the release in the order's history, and the second email; and
// whether nothing more will happen to that email.
func (s *Server) cancelSteps(f found, history map[string]time.Time, cancelled, release *OutboxEvent, record *Notification, trace string) ([]Step, bool) {
	steps := make([]Step, len(cancelInfo))
	for i, info := range cancelInfo {
		steps[i] = Step{Key: info.key, Title: info.title, State: "waiting", Source: s.sourceURL + info.source}
	}
	at := func(t time.Time) *time.Time { t = t.UTC(); return &t }
	order, res := f.order, f.reservation
	if cancelled != nil {
		if t := s.traceLink(cancelled.TraceID); t != "" {
			trace = t
		}
	}
	_, releaseApplied := history["released"]

	// cancelled: the status and the outbox row committed together.
	t, ok := history["cancelled"]
	if !ok {
		t = order.UpdatedAt
	}
	steps[0].State, steps[0].At, steps[0].Trace = "done", at(t), trace
	steps[0].Detail = "order cancelled"
	if cancelled != nil {
		steps[0].Detail += ", outbox row " + cancelled.ID + " (" + cancelled.Type + ")"
	}

	// cancel-published
	switch {
	case cancelled != nil && cancelled.State == "published" && cancelled.PublishedAt != nil:
		steps[1].State, steps[1].At, steps[1].Trace = "done", at(*cancelled.PublishedAt), trace
		steps[1].Detail = fmt.Sprintf("published %s after the commit", cancelled.PublishedAt.Sub(cancelled.CreatedAt).Round(time.Millisecond))
	case cancelled != nil && cancelled.State == "dead":
		steps[1].State, steps[1].Detail = "failed", fmt.Sprintf("parked as dead after %d attempts", cancelled.Attempts)
	case cancelled != nil:
		steps[1].Detail = fmt.Sprintf("pending in the outbox, %d failed attempt(s)", cancelled.Attempts)
	case release != nil || releaseApplied:
		steps[1].State, steps[1].Detail = "done", "published (its outbox row has since been cleaned up)"
	}

	// released and release-announced: the release commits with its StockReleased row, so
	// that row's creation is the release's time.
	switch {
	case release != nil:
		steps[2].State, steps[2].At, steps[2].Trace = "done", at(release.CreatedAt), trace
		switch {
		case res.Outcome == "cancelled":
			steps[2].Detail = "nothing to give back: the cancellation came before the placement, and its tombstone keeps the placement from reserving"
		case res.Outcome == "rejected":
			steps[2].Detail = "nothing to give back: the order had been rejected"
		default:
			n := copies(order.Lines)
			steps[2].Detail = fmt.Sprintf("%d %s given back; the reservation now holds %d line(s)", n, plural(n, "copy", "copies"), len(res.Lines))
		}
		if release.State == "published" && release.PublishedAt != nil {
			steps[3].State, steps[3].At, steps[3].Trace = "done", at(*release.PublishedAt), trace
			steps[3].Detail = release.Type
		} else {
			steps[3].Detail = release.Type + " pending in inventory's outbox"
		}
	case releaseApplied:
		steps[2].State, steps[2].Detail = "done", "released (its outbox row has since been cleaned up)"
		steps[3].State, steps[3].Detail = "done", "published (its outbox row has since been cleaned up)"
	}

	// release-applied
	if t, ok := history["released"]; ok {
		steps[4].State, steps[4].At, steps[4].Trace = "done", at(t), trace
		steps[4].Detail = "released added to the order's history"
	}

	// cancel-email and cancel-delivered
	return steps, s.emailSteps(steps[5:7], record, f.emails, trace)
}

// copies is the number of copies of the lines.
func copies(lines []Line) int {
	n := 0
	for _, l := range lines {
		n += l.Quantity
	}
	return n
}

// traceLink is the trace's page in Jaeger, or "" without JAEGER_URL or a trace id.
func (s *Server) traceLink(traceID string) string {
	if s.jaegerURL == "" || traceID == "" {
		return ""
	}
	return s.jaegerURL + "/trace/" + traceID
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
