package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// BenchmarkOutboxWriteNotify measures what the outbox's wake-up costs the transactions
// that write events: writers at concurrency 16 commit one outbox row each (the shape of
// PlaceOrder's transaction, its order reduced to the row), in three settings, rotating
// which goes first, with a relay's LISTEN connection open throughout:
//
//   - asleep: a relay holds the wake lock, as one waiting for a wake-up does, so every
//     writer's trigger sends NOTIFY outbox;
//   - awake: the trigger as it is and no relay asleep, as under load, so the trigger only
//     shares the wake lock (00004_outbox_wake_only_idle_relays.sql);
//   - silent: the trigger disabled.
//
// Postgres takes one lock for every committing transaction that has notified, and holds
// it across the commit's WAL flush, so notifying commits cannot share a flush:
// asleep/silent is what notifying every write costs, awake/silent what is left of it.
func BenchmarkOutboxWriteNotify(b *testing.B) {
	migrated, _, _ := setup(b)
	ctx := context.Background()
	const writers, perWriter = 16, 100
	cfg := migrated.Config()
	cfg.MaxConns = writers
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		b.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN outbox"); err != nil {
		b.Fatal(err)
	}
	write := func(prefix string) time.Duration { return writeConcurrently(b, pool, writers, perWriter, prefix) }
	setTrigger := func(on bool) {
		verb := map[bool]string{true: "ENABLE", false: "DISABLE"}[on]
		if _, err := pool.Exec(ctx, "ALTER TABLE outbox "+verb+" TRIGGER outbox_notify"); err != nil {
			b.Fatal(err)
		}
	}
	sleepingRelay, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		b.Fatal(err)
	}
	defer sleepingRelay.Close(ctx)
	setWakeLock := func(held bool) {
		verb := map[bool]string{true: "lock", false: "unlock"}[held]
		if _, err := sleepingRelay.Exec(ctx, "SELECT pg_advisory_"+verb+"(hashtextextended('outbox wake', 0))"); err != nil {
			b.Fatal(err)
		}
	}
	settings := []string{"asleep", "awake", "silent"}
	took := map[string]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range settings {
			setting := settings[(i+j)%len(settings)]
			b.StopTimer()
			setTrigger(setting != "silent")
			if setting == "asleep" {
				setWakeLock(true)
			}
			b.StartTimer()
			took[setting] += write(fmt.Sprintf("%s-%d-%d", setting, i, time.Now().UnixNano()))
			b.StopTimer()
			if setting == "asleep" {
				setWakeLock(false)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	setTrigger(true)
	rate := func(d time.Duration) float64 { return float64(writers*perWriter*b.N) / d.Seconds() }
	b.ReportMetric(rate(took["asleep"]), "notify-commits/s")
	b.ReportMetric(rate(took["awake"]), "awake-commits/s")
	b.ReportMetric(rate(took["silent"]), "silent-commits/s")
	b.ReportMetric(rate(took["asleep"])/rate(took["silent"]), "notify/silent")
	b.ReportMetric(rate(took["awake"])/rate(took["silent"]), "awake/silent")
}

// writeConcurrently commits writers×perWriter transactions of one outbox row each, from
// writers goroutines on pool, and returns how long that took.
func writeConcurrently(b *testing.B, pool *pgxpool.Pool, writers, perWriter int, prefix string) time.Duration {
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := outbox.Write(ctx, tx, outbox.Event{Source: "bookstore/test", Type: testenv.ExampleType, AggregateType: "order",
						AggregateID: fmt.Sprintf("%s-%d-%d", prefix, w, i), Sequence: 1, Data: map[string]int{"n": i}})
					return err
				})
				if err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkOutboxWriteCommitDelay measures Postgres's group commit for the writers of
// events: 48 writers commit one outbox row each (as BenchmarkOutboxWriteNotify's, no relay
// asleep), with the server's defaults (commit_delay 0) and with commit_delay 100 and
// 1000 µs (commit_siblings 5), set per session, rotating which goes first. commit_delay
// makes a committing backend wait, when at least commit_siblings others are in a
// transaction, so that one WAL flush covers the commits that arrive meanwhile.
func BenchmarkOutboxWriteCommitDelay(b *testing.B) {
	admin, dbURL := testenv.Database(b, "outbox")
	ctx := context.Background()
	migrated, err := pgdb.Open(ctx, admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		b.Fatal(err)
	}
	defer migrated.Close()
	const writers, perWriter = 48, 50
	delays := []string{"0", "100", "1000"}
	// One pool at a time, its connections made before the clock starts: the server's
	// connections are shared with other tests.
	open := func(delay string) *pgxpool.Pool {
		// commit_delay is a superuser's setting: the writers connect as the admin, to the
		// service's database.
		cfg, err := pgxpool.ParseConfig(admin)
		if err != nil {
			b.Fatal(err)
		}
		cfg.ConnConfig.Database = migrated.Config().ConnConfig.Database
		cfg.MaxConns, cfg.MinConns = writers, writers
		cfg.ConnConfig.RuntimeParams["commit_delay"] = delay
		cfg.ConnConfig.RuntimeParams["commit_siblings"] = "5"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		for pool.Stat().TotalConns() < writers {
			time.Sleep(10 * time.Millisecond)
		}
		return pool
	}
	took := map[string]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range delays {
			delay := delays[(i+j)%len(delays)]
			b.StopTimer()
			pool := open(delay)
			b.StartTimer()
			took[delay] += writeConcurrently(b, pool, writers, perWriter, fmt.Sprintf("d%s-%d-%d", delay, i, time.Now().UnixNano()))
			b.StopTimer()
			pool.Close()
			b.StartTimer()
		}
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(writers*perWriter*b.N) / d.Seconds() }
	for _, delay := range delays {
		b.ReportMetric(rate(took[delay]), "delay"+delay+"us-commits/s")
	}
	b.ReportMetric(rate(took["100"])/rate(took["0"]), "delay100/none")
	b.ReportMetric(rate(took["1000"])/rate(took["0"]), "delay1000/none")
}
