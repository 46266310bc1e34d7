package emails

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// BenchmarkSendGroupCommitAgainstAlone sends b.N emails from 64 goroutines, as many as
// the system has in flight, with group commit (32) and with every send alone (1), on
// the production pool of 12 connections, and reports the emails per second of each
// and their ratio, both in the same run.
//
//	go test -run '^$' -bench SendGroupCommitAgainstAlone -benchtime 4000x ./services/emailprovider/internal/emails/
func BenchmarkSendGroupCommitAgainstAlone(b *testing.B) {
	admin, dbURL := testenv.Database(b, "emails")
	db, err := pgdb.Open(context.Background(), admin, dbURL, pgdb.Migrations{FS: schema.EmailProvider, VersionTable: "goose_emailprovider_version"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 12 // DATABASE_MAX_CONNS's default
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)

	rate := func(groupCommit int) float64 {
		s := service(b, pool, groupCommit)
		run := time.Now().UnixNano() // keys of their own: every send is a new email
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 64 {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					key := fmt.Sprintf("%d/%d", run, i)
					if _, err := s.Send(context.Background(), "bookstore", key, email(key)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(b.N) / time.Since(start).Seconds()
	}
	b.ResetTimer()
	alone := rate(1)
	group := rate(32)
	b.ReportMetric(alone, "alone-emails/s")
	b.ReportMetric(group, "group-emails/s")
	b.ReportMetric(group/alone, "group/alone")
}
