package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/testenv"
)

// POST /orders remembers an Idempotency-Key for IDEMPOTENCY_KEY_RETENTION (24 h), not
// forever: ordering forgets older keys on a ticker, and once at start.

func TestIdempotencyKeysOlderThanTheRetentionAreForgottenAndARetryAfterThatIsANewOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)
	body := orderBody("ada@example.com", 1)
	first := map[string]string{}
	for _, key := range []string{"day-old", "nearly-a-day-old", "fresh"} {
		resp, b := postOrder(t, base, key, body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /orders with %s: %d %s", key, resp.StatusCode, b)
		}
		first[key] = resp.Header.Get("Location")
	}
	for key, age := range map[string]string{"day-old": "24 hours 1 minute", "nearly-a-day-old": "23 hours 59 minutes"} {
		if _, err := db.Exec(context.Background(), "UPDATE idempotency_keys SET created_at = now() - $2::interval WHERE key = $1", key, age); err != nil {
			t.Fatal(err)
		}
	}

	// The sweep of a second ordering process at its start, with the default retention,
	// forgets the key over 24 hours old and keeps the others. ForgetIdempotencyKeys, run
	// again, finds nothing more to forget.
	startInProcess(t, e)
	testenv.Eventually(t, 10*time.Second, "the day-old key forgotten", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM idempotency_keys WHERE key = 'day-old'") == 0
	})
	if n := testenv.Count(t, db, "SELECT count(*) FROM idempotency_keys WHERE key IN ('nearly-a-day-old', 'fresh')"); n != 2 {
		t.Errorf("%d of the two keys under 24 hours old are left, want both", n)
	}
	if n, err := orders.ForgetIdempotencyKeys(context.Background(), db, 24*time.Hour); n != 0 || err != nil {
		t.Errorf("a second sweep forgot %d keys (%v), want 0", n, err)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM orders"); n != 3 {
		t.Errorf("%d orders, want the 3 placed: forgetting a key keeps its order", n)
	}

	// A key still remembered replays the first order; a forgotten one places a new one.
	resp, b := postOrder(t, base, "nearly-a-day-old", body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != first["nearly-a-day-old"] {
		t.Errorf("retry with a remembered key: %d %q %s, want 200 and the first order", resp.StatusCode, resp.Header.Get("Location"), b)
	}
	resp, b = postOrder(t, base, "day-old", body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") == first["day-old"] {
		t.Errorf("retry with a forgotten key: %d %q %s, want 201 and a new order", resp.StatusCode, resp.Header.Get("Location"), b)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM orders"); n != 4 {
		t.Errorf("%d orders, want 4", n)
	}
}

func TestForgettingIdempotencyKeysKeepsThoseInsideAShorterRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := startInProcess(t, e)
	db := testenv.Pool(t, e.databaseURL)
	for _, key := range []string{"a", "b", "c"} {
		if resp, b := postOrder(t, base, key, orderBody("ada@example.com", 1)); resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /orders: %d %s", resp.StatusCode, b)
		}
	}
	if _, err := db.Exec(context.Background(), "UPDATE idempotency_keys SET created_at = now() - interval '2 hours' WHERE key <> 'c'"); err != nil {
		t.Fatal(err)
	}
	// The service's own retention job may hold the forgetting's lock at this moment, and
	// a call that finds it held yields and deletes nothing: call again until the old keys
	// are gone, and count what the calls forgot.
	var forgot int64
	testenv.Eventually(t, 10*time.Second, "the keys older than an hour forgotten", func() bool {
		n, err := orders.ForgetIdempotencyKeys(context.Background(), db, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		forgot += n
		return testenv.Count(t, db, "SELECT count(*) FROM idempotency_keys WHERE key <> 'c'") == 0
	})
	if forgot != 2 {
		t.Errorf("forgot %d keys, want the 2 older than an hour", forgot)
	}
	if n := testenv.Count(t, db, "SELECT count(*) FROM idempotency_keys WHERE key = 'c'"); n != 1 {
		t.Error("the key younger than the retention was forgotten")
	}
}

func TestIDEMPOTENCY_KEY_RETENTIONMustBeAPositiveDuration(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0s", "-1h", "24", "a day"} {
		// Refused before anything starts; were it not, the service would run until ctx ends.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := run(ctx, nil, func(k string) string {
			if k == "IDEMPOTENCY_KEY_RETENTION" {
				return v
			}
			return ""
		}, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "IDEMPOTENCY_KEY_RETENTION") {
			t.Errorf("IDEMPOTENCY_KEY_RETENTION=%s: %v, want a start-up error naming it", v, err)
		}
	}
}
