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
	"github.com/bookstore-go/bookstore/testenv"
)

// BenchmarkOutboxWriteNotify measures what the outbox's wake-up costs the transactions
// that write events: writers at concurrency 16 commit one outbox row each (the shape of
// PlaceOrder's transaction, its order reduced to the row), once with the trigger that
// sends NOTIFY outbox at commit and once with it disabled, alternating which goes first,
// with a relay's LISTEN connection open throughout. Postgres takes one lock for every
// committing transaction that has notified, and holds it across the commit's WAL flush,
// so notifying commits cannot share a flush: notify/silent is what that costs.
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
	write := func(prefix string) time.Duration {
		var wg sync.WaitGroup
		var failed atomic.Value
		start := time.Now()
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
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
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	setTrigger := func(on bool) {
		verb := map[bool]string{true: "ENABLE", false: "DISABLE"}[on]
		if _, err := pool.Exec(ctx, "ALTER TABLE outbox "+verb+" TRIGGER outbox_notify"); err != nil {
			b.Fatal(err)
		}
	}
	took := map[bool]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, notify := range []bool{i%2 == 0, i%2 != 0} {
			b.StopTimer()
			setTrigger(notify)
			b.StartTimer()
			took[notify] += write(fmt.Sprintf("n%v-%d-%d", notify, i, time.Now().UnixNano()))
		}
	}
	b.StopTimer()
	setTrigger(true)
	rate := func(d time.Duration) float64 { return float64(writers*perWriter*b.N) / d.Seconds() }
	b.ReportMetric(rate(took[true]), "notify-commits/s")
	b.ReportMetric(rate(took[false]), "silent-commits/s")
	b.ReportMetric(rate(took[true])/rate(took[false]), "notify/silent")
}
