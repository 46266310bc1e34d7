package faults

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// The rate check fails below 80% of the share published before, passes at or above it,
// sets no bar above keeping up, and compares nothing on too few events.
func TestQueueFullRateCheckFailsBelowEightyPercentOfWhatWasWritten(t *testing.T) {
	for _, tc := range []struct {
		before, during counted
		checked, fails bool
	}{
		{counted{100, 100}, counted{100, 79}, true, true},
		{counted{100, 100}, counted{100, 80}, true, false},
		{counted{100, 100}, counted{60, 60}, true, false},  // a quieter load, kept up with
		{counted{100, 130}, counted{100, 85}, true, false}, // a baseline catching up asks no more than keeping up
		{counted{100, 50}, counted{100, 45}, true, false},  // slow before, as slow during
		{counted{100, 100}, counted{100, 0}, true, true},
		{counted{queueFullMinEvents - 1, 19}, counted{100, 0}, false, false},
	} {
		r := rateRatio(tc.before, tc.during)
		c := withRate(check.FaultCheck{Checked: true, Drain: time.Second}, r)
		if r.checked != tc.checked || (c.Violation == check.QueueFullStarved) != tc.fails {
			t.Errorf("%+v before, %+v during: checked %v, ratio %.2f, violation %q", tc.before, tc.during, r.checked, r.ratio, c.Violation)
		}
		if !strings.Contains(c.Detail, "rate") {
			t.Errorf("detail %q does not report the rate", c.Detail)
		}
	}
	// A worse violation found first is kept.
	c := withRate(check.FaultCheck{Checked: true, Violation: check.QueueFullLost, Detail: "dead"}, rateRatio(counted{100, 100}, counted{100, 10}))
	if c.Violation != check.QueueFullLost {
		t.Errorf("violation %q, want %q kept", c.Violation, check.QueueFullLost)
	}
}

// A queue_full whose cap met a lull in the load does not blame the cap: the load arrives
// as a Poisson process, and the two-hour soak's one failed rate check was 230 events
// published against 293, every one of them published as soon as written. A relay that
// fell behind what was written still fails.
func TestAQueueFullBlamesTheCapForEventsLeftBehindNotForALull(t *testing.T) {
	sys := &harness.System{DBs: map[string]*pgxpool.Pool{
		"ordering":  outboxDatabase(t, "qfordering"),
		"inventory": outboxDatabase(t, "qfinventory"),
	}}
	in := NewInjector(sys, nil, nil)
	queue := contracts.QueueNotificationStockEvents
	for _, tc := range []struct {
		name               string
		written, published int // during the cap; 293 of 293 before it
		fails              bool
	}{
		{"a lull kept up with", 230, 230, false},
		{"a relay fallen behind", 290, 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			baseline := time.Now().Add(-time.Hour).Truncate(time.Second)
			start := baseline.Add(6 * time.Second)
			end := start.Add(6 * time.Second)
			execAll(t, sys.DBs["ordering"], "TRUNCATE outbox")
			writeEvents(t, sys.DBs["ordering"], baseline, start, 293, 293)
			writeEvents(t, sys.DBs["ordering"], start, end, tc.written, tc.published)
			r := in.queueFullRate(t.Context(), queue, baseline, start, end, true)
			c := withRate(check.FaultCheck{Checked: true}, r)
			if !r.checked || (c.Violation == check.QueueFullStarved) != tc.fails {
				t.Errorf("checked %v, violation %q (%s); want it to fail: %v", r.checked, c.Violation, r.detail, tc.fails)
			}
		})
	}
}

// outboxDatabase is a fresh database called name with the platform's outbox.
func outboxDatabase(t *testing.T, name string) *pgxpool.Pool {
	t.Helper()
	admin, dbURL := testenv.Database(t, name)
	pool, err := pgdb.Open(t.Context(), admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// writeEvents writes n order events spread evenly over [from, to), each id made at the
// time its event was written, the first published of them published 20 ms after that.
func writeEvents(t *testing.T, pool *pgxpool.Pool, from, to time.Time, n, published int) {
	t.Helper()
	rows := make([][]any, n)
	step := to.Sub(from) / time.Duration(n)
	for i := range rows {
		at := from.Add(time.Duration(i) * step)
		id := outbox.IDFloor(at)
		if _, err := rand.Read(id[7:]); err != nil {
			t.Fatal(err)
		}
		id[8] = 0x80 | id[8]&0x3f // the RFC 9562 variant
		state, publishedAt := "pending", any(nil)
		if i < published {
			state, publishedAt = "published", at.Add(20*time.Millisecond)
		}
		rows[i] = []any{id, "order", fmt.Sprintf("%s-%d", at.Format(time.RFC3339Nano), i), 1, contracts.OrderPlaced, 1, "{}", state, at, publishedAt}
	}
	if _, err := pool.CopyFrom(t.Context(), pgx.Identifier{"outbox"},
		[]string{"id", "aggregate_type", "aggregate_id", "sequence", "event_type", "schema_version", "envelope", "state", "created_at", "published_at"},
		pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
}

// execAll runs each statement on pool, failing the test on the first error.
func execAll(t *testing.T, pool *pgxpool.Pool, sql ...string) {
	t.Helper()
	for _, q := range sql {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
