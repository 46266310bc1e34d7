package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
)

// outboxEvent is one item of GET /orders/{id}/events.
type outboxEvent struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	Sequence    int        `json:"sequence"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	TraceID     string     `json:"trace_id"`
	CreatedAt   time.Time  `json:"created_at"`
	PublishedAt *time.Time `json:"published_at"`
}

func getEvents(t *testing.T, base, id string) (int, []outboxEvent) {
	t.Helper()
	resp, err := http.Get(base + "/orders/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []outboxEvent
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&events); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, events
}

// GET /orders/{id}/events shows the order's OrderPlaced in the outbox: written with the
// order, then published by the relay, with the trace of the request that placed it.
func TestOrderEventsShowTheOutboxRowWrittenThenPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)

	resp, body := postOrder(t, base, "", orderBody("ada@example.com", 1))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var order struct {
		ID        string    `json:"id"`
		CreatedAt time.Time `json:"created_at"`
	}
	decodeJSON(t, body, &order)

	var events []outboxEvent
	testenv.Eventually(t, 10*time.Second, "the order's event published", func() bool {
		var code int
		code, events = getEvents(t, base, order.ID)
		if code != http.StatusOK {
			t.Fatalf("GET /orders/%s/events: %d", order.ID, code)
		}
		return len(events) == 1 && events[0].State == "published"
	})
	ev := events[0]
	if ev.Type != "ordering.order-placed.v1" || ev.Sequence != 1 || ev.Attempts != 0 {
		t.Errorf("event = %+v, want ordering.order-placed.v1, sequence 1, no failed attempt", ev)
	}
	if ev.CreatedAt.Sub(order.CreatedAt).Abs() > time.Second {
		t.Errorf("created_at %v, want the order's %v (one transaction)", ev.CreatedAt, order.CreatedAt)
	}
	if ev.PublishedAt == nil || ev.PublishedAt.Before(ev.CreatedAt) {
		t.Errorf("published_at %v, want a time after created_at %v", ev.PublishedAt, ev.CreatedAt)
	}
	if len(ev.TraceID) != 32 || strings.Trim(ev.TraceID, "0123456789abcdef") != "" {
		t.Errorf("trace_id %q, want 32 hex digits", ev.TraceID)
	}
}

func TestOrderEventsAnswerProblemsForABadOrUnknownID(t *testing.T) {
	t.Parallel()
	base := startInProcess(t, newEnv(t))
	for id, want := range map[string]int{
		"not-a-uuid":                           http.StatusBadRequest,
		"018f2b1e-0000-7000-8000-00000000ffff": http.StatusNotFound,
	} {
		if code, _ := getEvents(t, base, id); code != want {
			t.Errorf("GET /orders/%s/events: %d, want %d", id, code, want)
		}
	}
}
