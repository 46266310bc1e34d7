package web

import (
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
		"email still processing": {confirmed, []OutboxEvent{published}, res,
			[]Notification{{Kind: "order-confirmed", Status: "processing", Attempts: 1, UpdatedAt: later}}, nil,
			map[string]string{"email": "waiting", "delivered": "waiting"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			j := s.steps(c.order, c.events, c.res, c.records, c.email)
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
	j := s.steps(o, nil, &Reservation{Outcome: "rejected", AnsweredAt: t0, Lines: []Line{}}, nil, nil)
	if got := states(j); got["reserved"] != "rejected" || got["applied"] != "rejected" {
		t.Errorf("states %v, want reserved and applied rejected", got)
	}
	if s.traceLink("0123") != "" {
		t.Error("a trace link without JAEGER_URL")
	}
}
