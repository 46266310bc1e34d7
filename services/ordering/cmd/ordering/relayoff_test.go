package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
)

// With ORDERING_RELAY=0 the API process writes the order and its outbox row and publishes
// nothing: the row stays pending until an `ordering relay` started beside it, on the
// same database and vhost, publishes it. This is how `make run` runs ordering with the
// storefront's demos, so the relay can be paused on its own.
func TestRelayOffLeavesTheOutboxToARelayProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e, "ORDERING_RELAY", "0")

	resp, body := postOrder(t, base, "relay-off", orderBody("ada@example.com", 1))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var order struct {
		ID string `json:"id"`
	}
	decodeJSON(t, body, &order)

	// The order is committed (201) and no relay runs anywhere on this database: its row is
	// pending, unclaimed, never tried.
	db := testenv.Pool(t, e.databaseURL)
	const row = "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND state = $2"
	if n := testenv.Count(t, db, row+" AND attempts = 0 AND claimed_by IS NULL", order.ID, "pending"); n != 1 {
		t.Fatalf("%d pending, unclaimed outbox rows for order %s right after 201, want 1 (the API process ran a relay?)", n, order.ID)
	}

	// The relay as a process of its own publishes it.
	sut.StartProcess(t, testenv.Build(t, "."), []string{"relay"}, e.vars("RELAY_ID", "relay-beside"))
	testenv.Eventually(t, 30*time.Second, "the relay process publishes the row", func() bool {
		return testenv.Count(t, db, row, order.ID, "published") == 1
	})
	if n := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE aggregate_id = $1", order.ID); n != 1 {
		t.Errorf("%d outbox rows for order %s, want 1", n, order.ID)
	}
}

func TestRelayVariable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ORDERING_RELAY") {
		t.Errorf("--help does not list ORDERING_RELAY:\n%s", out.String())
	}
	for _, tc := range []struct {
		args  []string
		value string
	}{
		{nil, "yes"},
		{nil, "2"},
		{[]string{"relay"}, "0"}, // the relay alone without its relay: nothing to run
	} {
		err := run(context.Background(), tc.args, func(k string) string {
			return map[string]string{"ORDERING_RELAY": tc.value, "HTTP_ADDR": "127.0.0.1:0"}[k]
		}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "ORDERING_RELAY") {
			t.Errorf("run(%v) with ORDERING_RELAY=%s = %v, want an error naming ORDERING_RELAY", tc.args, tc.value, err)
		}
	}
}
