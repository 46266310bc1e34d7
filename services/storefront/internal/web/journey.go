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
	State  string     `json:"state"` // waiting, done, rejected (done, with a rejection) or failed
	Detail string     `json:"detail"`
	At     *time.Time `json:"at,omitempty"`
	Source string     `json:"source"`          // the file that does it, a link into the repository
	Trace  string     `json:"trace,omitempty"` // its trace in Jaeger, when JAEGER_URL is set
}

// Journey is everything the page shows of one order.
type Journey struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	// Done: nothing more will happen (the email delivered, or given up).
	Done  bool   `json:"done"`
	Steps []Step `json:"steps"`
}

// stepInfo is what is fixed about each step: its title and the file that does it.
var stepInfo = []struct{ key, title, source string }{
	{"placed", "Order and its outbox row committed in one transaction (ordering)", "services/ordering/internal/orders/place.go"},
	{"published", "Event published to the broker by the outbox relay (ordering)", "services/platform/outbox/relay.go"},
	{"reserved", "Inbox row claimed, stock reserved or rejected, outcome written to the outbox (inventory)", "services/inventory/internal/stock/reserve.go"},
	{"announced", "Outcome event published by inventory's relay", "services/platform/outbox/relay.go"},
	{"applied", "Outcome applied to the order (ordering)", "services/ordering/internal/orders/outcome.go"},
	{"email", "Email record: processing, then completed (notification)", "services/notification/internal/notifications/handle.go"},
	{"delivered", "Email accepted by the provider under its idempotency key (emailprovider)", "services/emailprovider/internal/emails/emails.go"},
}

// journey reads the order's journey from the services' public APIs, all at once.
func (s *Server) journey(ctx context.Context, id string) (Journey, error) {
	var (
		order        Order
		events       []OutboxEvent
		reservation  *Reservation
		records      []Notification
		errOrder     error
		errOptionals = make([]error, 3)
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { errOrder = s.api.get(gctx, s.api.urls.Ordering+"/orders/"+id, &order); return nil })
	g.Go(func() error {
		errOptionals[0] = s.api.get(gctx, s.api.urls.Ordering+"/orders/"+id+"/events", &events)
		return nil
	})
	g.Go(func() error {
		var r Reservation
		err := s.api.get(gctx, s.api.urls.Inventory+"/orders/"+id+"/reservation", &r)
		if err == nil {
			reservation = &r
		} else if !errors.Is(err, errNotFound) {
			errOptionals[1] = err
		}
		return nil
	})
	g.Go(func() error {
		errOptionals[2] = s.api.get(gctx, s.api.urls.Notification+"/notifications?order_id="+id, &records)
		return nil
	})
	_ = g.Wait()
	if errOrder != nil {
		return Journey{}, errOrder
	}
	if err := errors.Join(errOptionals...); err != nil {
		return Journey{}, err
	}
	var email *Email
	if len(records) > 0 && records[0].IdempotencyKey != "" {
		var e Email
		err := s.api.get(ctx, s.api.emailURL(records[0].IdempotencyKey), &e)
		switch {
		case err == nil:
			email = &e
		case !errors.Is(err, errNotFound):
			return Journey{}, err
		}
	}
	return s.steps(order, events, reservation, records, email), nil
}

// steps turns what the services answered into the journey's steps.
func (s *Server) steps(order Order, events []OutboxEvent, res *Reservation, records []Notification, email *Email) Journey {
	steps := make([]Step, len(stepInfo))
	for i, info := range stepInfo {
		steps[i] = Step{Key: info.key, Title: info.title, State: "waiting", Source: s.sourceURL + info.source}
	}
	traceID := ""
	var placed *OutboxEvent
	if len(events) > 0 {
		sort.Slice(events, func(i, j int) bool { return events[i].CreatedAt.Before(events[j].CreatedAt) })
		placed = &events[0]
		traceID = placed.TraceID
	}
	trace := s.traceLink(traceID)
	at := func(t time.Time) *time.Time { t = t.UTC(); return &t }

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
	if res != nil {
		steps[2].State, steps[2].At, steps[2].Trace = "done", at(res.AnsweredAt), trace
		if res.Outcome == "rejected" {
			steps[2].State, steps[2].Detail = "rejected", "not enough stock: nothing reserved, order rejected"
		} else {
			n := 0
			for _, l := range res.Lines {
				n += l.Quantity
			}
			steps[2].Detail = fmt.Sprintf("%d %s reserved", n, plural(n, "copy", "copies"))
		}
		if len(res.Events) > 0 {
			ev := res.Events[0]
			t := s.traceLink(ev.TraceID)
			if t == "" {
				t = trace
			}
			if ev.State == "published" && ev.PublishedAt != nil {
				steps[3].State, steps[3].At, steps[3].Trace = "done", at(*ev.PublishedAt), t
				steps[3].Detail = ev.Type
			} else {
				steps[3].Detail = ev.Type + " pending in inventory's outbox"
			}
		} else if order.Status != "pending" {
			steps[3].State, steps[3].Detail = "done", "published (its outbox row has since been cleaned up)"
		}
	}

	// applied
	if order.Status != "pending" {
		steps[4].State, steps[4].At, steps[4].Trace = "done", at(order.UpdatedAt), trace
		steps[4].Detail = "order " + order.Status
		if order.Status == "rejected" {
			steps[4].State = "rejected"
		}
	}

	// email and delivered
	done := false
	if len(records) > 0 {
		r := records[0]
		steps[5].At, steps[5].Trace = at(r.UpdatedAt), trace
		steps[5].Detail = fmt.Sprintf("%s: %s after %d provider attempt(s)", r.Kind, r.Status, r.Attempts)
		switch r.Status {
		case "completed":
			steps[5].State = "done"
		case "failed":
			steps[5].State, done = "failed", true
		default:
			steps[5].Detail = fmt.Sprintf("%s: %s, %d provider attempt(s) so far", r.Kind, r.Status, r.Attempts)
		}
	}
	if email != nil {
		steps[6].State, steps[6].At, steps[6].Trace = "done", at(email.CreatedAt), trace
		steps[6].Detail = fmt.Sprintf("%q to %s, delivered %d time(s)", email.Subject, email.To, email.Deliveries)
		if email.Deliveries != 1 {
			steps[6].State = "failed"
		}
		done = done || steps[5].State == "done"
	}
	// Notification and ordering each consume inventory's outcome: the email can be
	// delivered before ordering has applied the outcome, and a page that stopped watching
	// then would show the order pending for ever.
	done = done && order.Status != "pending"
	return Journey{OrderID: order.ID, Status: order.Status, Done: done, Steps: steps}
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
