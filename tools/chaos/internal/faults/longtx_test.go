package faults

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// One long transaction a run holds its snapshot for about half the load, minutes in make
// chaos and seconds in a short run, and its baseline and its hold both end before the
// load does, so that the load runs under the snapshot throughout.
func TestALongTransactionHoldsItsSnapshotForAboutHalfTheLoadAndEndsBeforeIt(t *testing.T) {
	short := config.Default
	short.Orders, short.Rate, short.FaultsPerKind, short.HeavyFaults = 400, 15, 7, 1
	for name, cfg := range map[string]config.Config{"make chaos": config.Default, "a short run": short} {
		span := cfg.LoadDuration()
		var n int
		for _, f := range Schedule(cfg, []string{"ordering-1", "inventory-1", "notification-1"}, []string{"ordering-1-postgres"}) {
			if f.Kind != check.FaultLongTransaction {
				continue
			}
			n++
			if f.Duration < span*2/5-time.Second || f.Duration > span/2+time.Second {
				t.Errorf("%s: held %v of a %v load, want about half", name, f.Duration, span)
			}
			if end := f.At + min(longTxBaseline, f.Duration/3) + f.Duration; end > span {
				t.Errorf("%s: held until %v of a %v load", name, end, span)
			}
		}
		if n != 1 {
			t.Errorf("%s: %d long transactions, want one: a second would hold the first's horizon", name, n)
		}
	}
	if d := config.Default; d.LoadDuration()*2/5 < 90*time.Second {
		t.Errorf("make chaos's load is %v: its long transactions last under a minute and a half", d.LoadDuration())
	}
}

// A long transaction fails its check when notification's median record is much slower
// under the snapshot than before it, as when a claim read an index whole that the
// snapshot kept growing, and passes when it is only as slow as a busier machine makes it.
func TestALongTransactionThatSlowsNotificationsMedianRecordFailsItsCheck(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, c := range []struct {
		name           string
		before, during emailTimes
		slow           bool
	}{
		{"a claim that reads the snapshot's index whole (the soak's fall)", emailTimes{n: 400, p50: ms(16)}, emailTimes{n: 20000, p50: ms(280)}, true},
		{"a busier machine", emailTimes{n: 400, p50: ms(16)}, emailTimes{n: 20000, p50: ms(40)}, false},
		{"five times a fast median, but by less than the slack", emailTimes{n: 400, p50: ms(4)}, emailTimes{n: 20000, p50: ms(20)}, false},
		{"too few records before it to judge", emailTimes{n: 5, p50: ms(16)}, emailTimes{n: 20000, p50: ms(280)}, false},
	} {
		if slow, detail := longTxEmailVerdict(20*time.Minute, c.before, c.during); slow != c.slow {
			t.Errorf("%s: slow %v (%q), want %v", c.name, slow, detail, c.slow)
		}
	}
	if slow, _ := longTxEmailVerdict(11*time.Second, emailTimes{n: 54, p50: ms(15)}, emailTimes{n: 62, p50: ms(150)}); slow {
		t.Error("a hold of 11 s (the smoke run's) judged: its medians are the other faults', not the snapshot's")
	}
}

// A long transaction fails its check when a read of the books' stock is much slower under
// the snapshot than before it, as when the ten books' rows were updated in place and every
// lookup walked the versions the snapshot kept, and passes when it is only as slow as a
// busier machine makes it.
func TestALongTransactionThatSlowsTheStockReadsFailsItsCheck(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	probes := func(n int, d time.Duration) []time.Duration { return slices.Repeat([]time.Duration{d}, n) }
	for _, c := range []struct {
		name           string
		before, during []time.Duration
		slow           bool
	}{
		{"every lookup walks the snapshot's versions (the soak's fall)", probes(20, ms(0.8)), probes(5000, ms(120)), true},
		{"the newest level read by its key on a busier machine", probes(20, ms(0.2)), probes(5000, ms(0.5)), false},
		{"ten times a fast median, but by less than the slack", probes(20, ms(0.3)), probes(5000, ms(3)), false},
		{"too few probes before it to judge", probes(3, ms(0.8)), probes(5000, ms(120)), false},
	} {
		if slow, detail := longTxStockVerdict(20*time.Minute, c.before, c.during); slow != c.slow {
			t.Errorf("%s: slow %v (%q), want %v", c.name, slow, detail, c.slow)
		}
	}
	if slow, _ := longTxStockVerdict(2*time.Minute, probes(20, ms(0.8)), probes(240, ms(120))); slow {
		t.Error("a hold of 2 minutes (make chaos's) judged")
	}
}

// The stock probe reads inventory's schema as it is: every book of the seeded catalogue,
// each by the newest of its stock levels, the primary key read backwards once a few
// hundred levels lie behind it (and, under a held snapshot, however many dead ones).
func TestTheStockProbeReadsEveryBooksNewestLevelByItsKey(t *testing.T) {
	admin, dbURL := testenv.Database(t, "inventory")
	pool, err := pgdb.Open(t.Context(), admin, dbURL,
		pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"},
		pgdb.Migrations{FS: schema.Inventory, VersionTable: "goose_inventory_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var books int
	if err := pool.QueryRow(t.Context(), stockProbe).Scan(&books); err != nil {
		t.Fatal(err)
	}
	if books != 10 {
		t.Fatalf("the probe read %d books' stock, want the 10 of the seeded catalogue", books)
	}
	report, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close(context.Background())
	for _, q := range []string{"BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT count(*) FROM books"} {
		if _, err := report.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	// 300 changes of every book's stock, as reservations append them, then autovacuum's
	// ANALYZE (this machine's server runs none).
	if _, err := pool.Exec(t.Context(), `INSERT INTO stock_levels (book_id, version, on_hand, reserved)
		SELECT book_id, version + v, on_hand, 0 FROM stock_levels, generate_series(1, 300) v`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "ANALYZE stock_levels"); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(t.Context(), "EXPLAIN "+stockProbe)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(lines, "\n"); !strings.Contains(text, "Scan Backward using stock_levels_pkey") {
		t.Fatalf("the probe does not read the levels' key backwards:\n%s", text)
	}
}
