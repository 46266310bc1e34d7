package web

import (
	"strings"
	"testing"
	"time"
)

// states returns each step's state by key.
func states(j Journey) map[string]string {
	m := map[string]string{}
	for _, s := range j.Steps {
		m[s.Key] = s.State
	}
	return m
}

// answers is what the services answered about an order with at most one email, the
// provider's copy of the first record's.
func answers(order Order, events []OutboxEvent, res *Reservation, records []Notification, email *Email) found {
	f := found{order: order, events: events, reservation: res, records: records, emails: map[string]*Email{}}
	if email != nil && len(records) > 0 {
		f.emails[records[0].Kind] = email
	}
	return f
}

// The steps read what the services answered: each case is a moment of a journey, or one
// that went wrong, and what the page must say about it.
func TestStepsShowWhatTheServicesAnswered(t *testing.T) {
	s := &Server{sourceURL: "https://example.com/blob/main/", jaegerURL: "http://jaeger:16686"}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	later := t0.Add(20 * time.Millisecond)
	placed := Order{ID: "o1", Status: "pending", Lines: []Line{{BookID: "b", Quantity: 2}}, CreatedAt: t0, UpdatedAt: t0}
	confirmed := placed
	confirmed.Status, confirmed.UpdatedAt = "confirmed", later
	pending := OutboxEvent{ID: "e1", Type: "ordering.order-placed.v1", State: "pending", TraceID: "0123456789abcdef0123456789abcdef", CreatedAt: t0}
	published := pending
	published.State, published.PublishedAt = "published", &later
	dead := pending
	dead.State, dead.Attempts = "dead", 25
	res := &Reservation{Outcome: "reserved", AnsweredAt: later, Lines: []Line{{BookID: "b", Quantity: 2}},
		Events: []OutboxEvent{{Type: "inventory.stock-reserved.v1", State: "published", CreatedAt: later, PublishedAt: &later}}}
	completed := []Notification{{Kind: "order-confirmed", Status: "completed", IdempotencyKey: "order/o1/order-confirmed", Attempts: 1, UpdatedAt: later}}

	for name, c := range map[string]struct {
		order   Order
		events  []OutboxEvent
		res     *Reservation
		records []Notification
		email   *Email
		want    map[string]string
		done    bool
	}{
		"just placed": {placed, []OutboxEvent{pending}, nil, nil, nil,
			map[string]string{"placed": "done", "published": "waiting", "reserved": "waiting", "delivered": "waiting"}, false},
		"parked as dead": {placed, []OutboxEvent{dead}, nil, nil, nil,
			map[string]string{"placed": "done", "published": "failed"}, false},
		"all the way": {confirmed, []OutboxEvent{published}, res, completed, &Email{Deliveries: 1, CreatedAt: later},
			map[string]string{"placed": "done", "published": "done", "reserved": "done", "announced": "done", "applied": "done", "email": "done", "delivered": "done"}, true},
		"delivered twice": {confirmed, []OutboxEvent{published}, res, completed, &Email{Deliveries: 2, CreatedAt: later},
			map[string]string{"delivered": "failed"}, true},
		"outbox rows cleaned up": {confirmed, nil, &Reservation{Outcome: "reserved", AnsweredAt: later}, nil, nil,
			map[string]string{"published": "done", "announced": "done", "email": "waiting"}, false},
		// Notification and ordering consume inventory's outcome apart: the email may be
		// delivered before ordering applies the outcome, and the page must keep watching.
		"emailed before the outcome is applied": {placed, []OutboxEvent{published}, res, completed, &Email{Deliveries: 1, CreatedAt: later},
			map[string]string{"applied": "waiting", "email": "done", "delivered": "done"}, false},
		"emailed before inventory's relay recorded its confirm": {confirmed, []OutboxEvent{published},
			&Reservation{Outcome: "reserved", AnsweredAt: later, Lines: res.Lines, Events: []OutboxEvent{{Type: "inventory.stock-reserved.v1", State: "pending", CreatedAt: later}}},
			completed, &Email{Deliveries: 1, CreatedAt: later},
			map[string]string{"announced": "waiting", "delivered": "done"}, false},
		"email still processing": {confirmed, []OutboxEvent{published}, res,
			[]Notification{{Kind: "order-confirmed", Status: "processing", Attempts: 1, UpdatedAt: later}}, nil,
			map[string]string{"email": "waiting", "delivered": "waiting"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			j := s.steps(answers(c.order, c.events, c.res, c.records, c.email))
			got := states(j)
			for key, want := range c.want {
				if got[key] != want {
					t.Errorf("step %s: %s, want %s", key, got[key], want)
				}
			}
			if j.Done != c.done {
				t.Errorf("done = %v, want %v", j.Done, c.done)
			}
			if len(j.Steps) != len(stepInfo) {
				t.Fatalf("%d steps, want %d", len(j.Steps), len(stepInfo))
			}
			if first := j.Steps[0]; first.Source != s.sourceURL+"services/ordering/internal/orders/place.go" ||
				(len(c.events) > 0 && first.Trace != s.jaegerURL+"/trace/"+pending.TraceID) {
				t.Errorf("first step links %q and %q", first.Source, first.Trace)
			}
		})
	}
}

func TestARejectedOrderShowsItsRejection(t *testing.T) {
	s := &Server{}
	t0 := time.Now()
	o := Order{ID: "o1", Status: "rejected", CreatedAt: t0, UpdatedAt: t0}
	j := s.steps(answers(o, nil, &Reservation{Outcome: "rejected", AnsweredAt: t0, Lines: []Line{}}, nil, nil))
	if got := states(j); got["reserved"] != "rejected" || got["applied"] != "rejected" {
		t.Errorf("states %v, want reserved and applied rejected", got)
	}
	if s.traceLink("0123") != "" {
		t.Error("a trace link without JAEGER_URL")
	}
}

// A cancellation continues the journey: each of its steps reads its own answer (ordering's
// second outbox row, inventory's StockReleased, the order's history, the second email),
// and the journey is over only when the cancellation's email is.
func TestACancellationContinuesTheJourneyToTheSecondEmail(t *testing.T) {
	s := &Server{sourceURL: "https://example.com/blob/main/"}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	t1, t2, t3, t4 := t0.Add(10*time.Millisecond), t0.Add(time.Second), t0.Add(1100*time.Millisecond), t0.Add(1200*time.Millisecond)
	order := Order{ID: "o1", Status: "cancelled", Lines: []Line{{BookID: "b", Quantity: 2}}, CreatedAt: t0, UpdatedAt: t2,
		History: []HistoryEntry{{"placed", t0}, {"confirmed", t1}, {"cancelled", t2}}}
	released := order
	released.History = append(released.History, HistoryEntry{"released", t4})
	events := []OutboxEvent{
		{ID: "e2", Type: cancelledType, State: "published", CreatedAt: t2, PublishedAt: &t3},
		{ID: "e1", Type: "ordering.order-placed.v2", State: "published", CreatedAt: t0, PublishedAt: &t1},
	}
	reserved := OutboxEvent{Type: "inventory.stock-reserved.v1", State: "published", CreatedAt: t1, PublishedAt: &t1}
	release := OutboxEvent{Type: releasedType, State: "published", CreatedAt: t3, PublishedAt: &t4}
	// Released: the reservation keeps its outcome and loses its lines.
	res := &Reservation{Outcome: "reserved", AnsweredAt: t1, Lines: []Line{}, Events: []OutboxEvent{reserved, release}}
	// In kind order, as notification lists them: the cancellation's record comes first.
	records := []Notification{
		{Kind: "order-cancelled", Status: "completed", IdempotencyKey: "order/o1/order-cancelled", Attempts: 1, UpdatedAt: t4},
		{Kind: "order-confirmed", Status: "completed", IdempotencyKey: "order/o1/order-confirmed", Attempts: 1, UpdatedAt: t1},
	}
	emails := map[string]*Email{
		"order-confirmed": {Subject: "Your order is confirmed", Deliveries: 1, CreatedAt: t1},
		"order-cancelled": {Subject: "Your order is cancelled", Deliveries: 1, CreatedAt: t4},
	}

	all := []string{"placed", "published", "reserved", "announced", "applied", "email", "delivered",
		"cancelled", "cancel-published", "released", "release-announced", "release-applied", "cancel-email", "cancel-delivered"}
	for name, c := range map[string]struct {
		f    found
		want map[string]string
		done bool
	}{
		"cancelled, not yet released": {found{order: order, events: events, reservation: &Reservation{Outcome: "reserved", AnsweredAt: t1, Lines: order.Lines, Events: []OutboxEvent{reserved}},
			records: records[1:], emails: map[string]*Email{"order-confirmed": emails["order-confirmed"]}},
			map[string]string{"delivered": "done", "cancelled": "done", "cancel-published": "done", "released": "waiting", "cancel-email": "waiting"}, false},
		"released, its email not yet sent": {found{order: released, events: events, reservation: res, records: records[1:], emails: map[string]*Email{"order-confirmed": emails["order-confirmed"]}},
			map[string]string{"email": "done", "released": "done", "release-announced": "done", "release-applied": "done", "cancel-email": "waiting"}, false},
		// The provider has the second email before notification has recorded its answer,
		// and ordering the release before inventory's relay has recorded its confirm: the
		// page must keep watching until both catch up.
		"cancellation email sent, its record not yet completed": {found{order: released, events: events, reservation: res,
			records: []Notification{{Kind: "order-cancelled", Status: "processing", IdempotencyKey: "order/o1/order-cancelled", Attempts: 1, UpdatedAt: t4}, records[1]}, emails: emails},
			map[string]string{"cancel-email": "waiting", "cancel-delivered": "done", "applied": "done"}, false},
		"release applied, its event's confirm not yet recorded": {found{order: released, events: events,
			reservation: &Reservation{Outcome: "reserved", AnsweredAt: t1, Lines: []Line{}, Events: []OutboxEvent{reserved, {Type: releasedType, State: "pending", CreatedAt: t3}}},
			records:     records, emails: emails},
			map[string]string{"released": "done", "release-announced": "waiting", "release-applied": "done", "cancel-delivered": "done"}, false},
		"all the way": {found{order: released, events: events, reservation: res, records: records, emails: emails},
			map[string]string{"placed": "done", "published": "done", "reserved": "done", "announced": "done", "applied": "done", "email": "done", "delivered": "done",
				"cancelled": "done", "cancel-published": "done", "released": "done", "release-announced": "done", "release-applied": "done", "cancel-email": "done", "cancel-delivered": "done"}, true},
		// The cancellation overtook the placement at inventory: its tombstone, nothing
		// reserved, no confirmation; the placement's remaining steps are never reached.
		"cancelled before inventory saw the placement": {found{order: Order{ID: "o1", Status: "cancelled", Lines: order.Lines, CreatedAt: t0, UpdatedAt: t2,
			History: []HistoryEntry{{"placed", t0}, {"cancelled", t2}, {"released", t4}}}, events: events,
			reservation: &Reservation{Outcome: "cancelled", AnsweredAt: t3, Lines: []Line{}, Events: []OutboxEvent{release}}, records: records[:1], emails: emails},
			map[string]string{"reserved": "skipped", "announced": "skipped", "applied": "skipped", "email": "skipped", "released": "done", "cancel-delivered": "done"}, true},
	} {
		t.Run(name, func(t *testing.T) {
			j := s.steps(c.f)
			got := states(j)
			for key, want := range c.want {
				if got[key] != want {
					t.Errorf("step %s: %s, want %s", key, got[key], want)
				}
			}
			if j.Done != c.done {
				t.Errorf("done = %v, want %v", j.Done, c.done)
			}
			if len(j.Steps) != len(all) {
				t.Fatalf("%d steps, want %d", len(j.Steps), len(all))
			}
			for i, step := range j.Steps {
				if step.Key != all[i] || step.Source == "" || (step.State == "done" && step.At == nil) {
					t.Errorf("step %d: %s at %v from %q, want %s with its time and source", i, step.Key, step.At, step.Source, all[i])
				}
			}
		})
	}

	j := s.steps(found{order: released, events: events, reservation: res, records: records, emails: emails})
	detail := map[string]string{}
	for _, step := range j.Steps {
		detail[step.Key] = step.Detail
	}
	for key, want := range map[string]string{
		"reserved":         "2 copies reserved (released since)",
		"email":            "order-confirmed: completed",
		"released":         "2 copies given back",
		"cancel-email":     "order-cancelled: completed",
		"cancel-delivered": "Your order is cancelled",
		"cancelled":        "outbox row e2 (" + cancelledType + ")",
	} {
		if !strings.Contains(detail[key], want) {
			t.Errorf("step %s says %q, want it to say %q", key, detail[key], want)
		}
	}
}
