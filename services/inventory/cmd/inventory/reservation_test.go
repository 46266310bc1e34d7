package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
)

type reservationAnswer struct {
	OrderID    string    `json:"order_id"`
	Outcome    string    `json:"outcome"`
	AnsweredAt time.Time `json:"answered_at"`
	Lines      []struct {
		BookID   string `json:"book_id"`
		Quantity int    `json:"quantity"`
	} `json:"lines"`
	Events []struct {
		Type        string     `json:"type"`
		State       string     `json:"state"`
		CreatedAt   time.Time  `json:"created_at"`
		PublishedAt *time.Time `json:"published_at"`
	} `json:"events"`
}

func getReservation(t *testing.T, base, id string) (int, reservationAnswer) {
	t.Helper()
	resp, err := http.Get(base + "/orders/" + id + "/reservation")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r reservationAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, r
}

// GET /orders/{id}/reservation shows inventory's one answer to an order, the same after
// its event arrived twice, with the lines it reserved and its outcome event published
// through inventory's outbox; 404 before an answer, 400 for a bad id.
func TestReservationShowsTheOneAnswerToAnOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	reserve := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 2})
	reject := orderPlaced(t, contracts.Line{BookID: dune, Quantity: 11})

	if code, _ := getReservation(t, base, reserve.Subject); code != http.StatusNotFound {
		t.Errorf("before the event: %d, want 404", code)
	}
	if code, _ := getReservation(t, base, "not-a-uuid"); code != http.StatusBadRequest {
		t.Errorf("bad id: %d, want 400", code)
	}
	publishEvent(t, e.amqpURL, reserve)
	publishEvent(t, e.amqpURL, reserve) // a duplicate: still one answer
	publishEvent(t, e.amqpURL, reject)

	for id, want := range map[string]struct {
		outcome, event string
		lines          int
	}{
		reserve.Subject: {"reserved", contracts.StockReserved, 1},
		reject.Subject:  {"rejected", contracts.StockRejected, 0},
	} {
		var r reservationAnswer
		testenv.Eventually(t, 20*time.Second, "order "+id+" answered and announced", func() bool {
			var code int
			code, r = getReservation(t, base, id)
			return code == http.StatusOK && len(r.Events) == 1 && r.Events[0].State == "published"
		})
		if r.OrderID != id || r.Outcome != want.outcome || len(r.Lines) != want.lines || r.Events[0].Type != want.event {
			t.Errorf("order %s: %+v, want %s with %d lines and one %s", id, r, want.outcome, want.lines, want.event)
		}
		if want.lines == 1 && (r.Lines[0].BookID != dune.String() || r.Lines[0].Quantity != 2) {
			t.Errorf("lines %+v, want 2 of Dune", r.Lines)
		}
		if r.Events[0].CreatedAt.Sub(r.AnsweredAt).Abs() > time.Second || r.Events[0].PublishedAt == nil {
			t.Errorf("event written %v, published %v; answered %v", r.Events[0].CreatedAt, r.Events[0].PublishedAt, r.AnsweredAt)
		}
	}
	if n := reserved(t, testenv.Pool(t, e.databaseURL), dune); n != 2 {
		t.Errorf("Dune reserved = %d, want 2", n)
	}
}
