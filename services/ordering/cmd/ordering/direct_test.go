package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/contracts"
)

// ORDERING_PUBLISHER=direct publishes each change's event once, when the change commits,
// and writes no outbox row; a replayed request publishes nothing more.
func TestDirectPublisherPublishesEachEventAtCommitWithoutAnOutboxRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e, "ORDERING_PUBLISHER", "direct")

	var order struct {
		ID string `json:"id"`
	}
	for i, want := range []int{http.StatusCreated, http.StatusOK} {
		resp, body := postOrder(t, base, "place-once", orderBody("ada@example.com", 1))
		if resp.StatusCode != want {
			t.Fatalf("POST /orders #%d: %d %s, want %d", i+1, resp.StatusCode, body, want)
		}
		decodeJSON(t, body, &order)
	}
	for i := range 2 {
		if resp, body := postCancel(t, base, order.ID, "cancel-once"); resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /orders/%s/cancel #%d: %d %s", order.ID, i+1, resp.StatusCode, body)
		}
	}

	var got []string
	for _, env := range orderEvents(t, e.amqpURL, order.ID) {
		got = append(got, env.Type+"#"+env.Sequence)
	}
	if want := contracts.OrderPlaced + "#1," + contracts.OrderCancelled + "#2"; strings.Join(got, ",") != want {
		t.Errorf("published %v, want %s", got, want)
	}
	if code, rows := getEvents(t, base, order.ID); code != http.StatusOK || len(rows) != 0 {
		t.Errorf("GET /orders/%s/events: %d, %d outbox rows; want 200 and none", order.ID, code, len(rows))
	}
}
