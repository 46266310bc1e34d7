package cluster

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/testenv"
)

// startPostgres starts a pair for one test and closes it when the test ends.
func startPostgres(t *testing.T, name string) *Postgres {
	t.Helper()
	if err := PostgresAvailable(); err != nil {
		testenv.Unavailable(t, "Postgres 15 binaries", err)
	}
	began := time.Now()
	p, err := StartPostgres(context.Background(), "", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("postgres primary + synchronous standby up in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if _, err := os.Stat(p.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("close left %s behind (%v)", p.dir, err)
		}
	})
	return p
}

// connect opens a connection to url for the rest of the test.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// rows returns the ids in table t of the primary the cluster's URL finds.
func ids(t *testing.T, p *Postgres) map[string]bool {
	t.Helper()
	conn := connect(t, p.AdminURL())
	rows, err := conn.Query(context.Background(), "SELECT id FROM acknowledged")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, id := range got {
		set[id] = true
	}
	return set
}

// A failover as CloudNativePG does it (the primary killed, the standby promoted, the old
// primary back as its standby) keeps every commit that was acknowledged, the cluster's URL
// finds the new primary by itself, and the new primary waits for its standby again once
// it has one.
func TestAPostgresFailoverKeepsEveryAcknowledgedCommitAndTheURLFindsTheNewPrimary(t *testing.T) {
	t.Parallel()
	p := startPostgres(t, "failover")
	ctx := context.Background()
	before := connect(t, p.AdminURL())
	if _, err := before.Exec(ctx, "CREATE TABLE acknowledged (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := before.Exec(ctx, "INSERT INTO acknowledged VALUES ($1)", id); err != nil {
			t.Fatal(err)
		}
	}
	times, err := p.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: kill %v, promote %v, rejoin %v", times.Kill.Round(time.Millisecond), times.Promote.Round(time.Millisecond), times.Rejoin.Round(time.Millisecond))
	if p.Primary() != 1 {
		t.Fatalf("primary is node %d after the failover, want 1", p.Primary())
	}
	if got := ids(t, p); len(got) != 3 {
		t.Errorf("after the failover the primary holds %v, want a, b, c", got)
	}
	after := connect(t, p.AdminURL())
	if _, err := after.Exec(ctx, "INSERT INTO acknowledged VALUES ('d')"); err != nil {
		t.Fatalf("a write through the URL after the failover: %v", err)
	}
	// The rejoined node is a synchronous standby again: pausing it holds the next commit.
	if err := p.PauseStandby(); err != nil {
		t.Fatal(err)
	}
	held := commitReturns(t, after, "e", "on")
	if err := p.ResumeStandby(); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the held commit, once the standby resumed: %v", err)
	}
	standby := connect(t, p.NodeURL(0))
	testenv.Eventually(t, 30*time.Second, "the rejoined standby replays e", func() bool {
		var n int
		return standby.QueryRow(ctx, "SELECT count(*) FROM acknowledged WHERE id = 'e'").Scan(&n) == nil && n == 1
	})
}

// holdBound is how long a commit that waits for a paused standby must not return: far
// longer than a commit takes on this machine, when nothing holds it.
const holdBound = 3 * time.Second

// commitReturns inserts id with synchronous_commit set to mode on conn, and fails the test
// if the commit returns within holdBound while mode is "on" (it must wait for the paused
// standby) or does not return within it while mode is "local". The channel gets the
// commit's result when it comes.
func commitReturns(t *testing.T, conn *pgx.Conn, id, mode string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		_, err := conn.Exec(ctx, "SET synchronous_commit = "+mode+"; INSERT INTO acknowledged VALUES ('"+id+"')")
		done <- err
	}()
	select {
	case err := <-done:
		if mode == "on" {
			t.Fatalf("commit of %s with synchronous_commit=on returned (%v) while the standby was paused: it did not wait for the standby", id, err)
		}
		if err != nil {
			t.Fatalf("commit of %s with synchronous_commit=%s: %v", id, mode, err)
		}
		ch := make(chan error, 1)
		ch <- nil
		return ch
	case <-time.After(holdBound):
		if mode != "on" {
			t.Fatalf("commit of %s with synchronous_commit=%s did not return within %v", id, mode, holdBound)
		}
		return done
	}
}

// The wrong design: ordering answering 201 after a commit acknowledged only by the primary
// (synchronous_commit=local) loses that order when the primary dies before its standby
// had it, and the promoted standby takes over without it. The default design waits for
// the standby's flush: a commit that returned is on the new primary, and one that never
// returned (no 201) may be lost.
func TestACommitAcknowledgedOnlyLocallyIsLostWhenTheStandbyIsPromoted(t *testing.T) {
	t.Parallel()
	p := startPostgres(t, "local")
	ctx := context.Background()
	conn := connect(t, p.AdminURL())
	if _, err := conn.Exec(ctx, "CREATE TABLE acknowledged (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO acknowledged VALUES ('synchronous')"); err != nil {
		t.Fatal(err)
	}

	if err := p.PauseStandby(); err != nil {
		t.Fatal(err)
	}
	// The wrong design's 201: returned while the standby could not have the order.
	<-commitReturns(t, conn, "local", "local")
	// The default design holds its 201 until the standby has flushed the order.
	held := commitReturns(t, connect(t, p.AdminURL()), "held", "on")

	if err := p.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err == nil {
		t.Error("the commit that waited for the standby returned success when the primary died")
	}
	if err := p.ResumeStandby(); err != nil {
		t.Fatal(err)
	}
	if err := p.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	got := ids(t, p)
	if !got["synchronous"] {
		t.Errorf("the commit acknowledged after the standby's flush is missing on the promoted standby: %v", got)
	}
	if got["local"] {
		t.Errorf("the commit acknowledged only locally survived the failover (%v): the standby had it, so this run did not show the loss", got)
	}
	t.Logf("on the promoted standby: %v (local: acknowledged and lost)", got)
}

// A server of its own, as a harness starts one when it needs settings this machine's
// Postgres does not have, runs with the defaults (autovacuum on, its launcher running),
// logs every autovacuum, has no standby to fail over to, and is gone once closed.
func TestASinglePostgresServerRunsWithTheDefaultsAndHasNoStandby(t *testing.T) {
	t.Parallel()
	if err := PostgresAvailable(); err != nil {
		testenv.Unavailable(t, "Postgres 15 binaries", err)
	}
	ctx := context.Background()
	p, err := StartPostgresAlone(ctx, "", "alone")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if _, err := os.Stat(p.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("close left %s behind (%v)", p.dir, err)
		}
	}()
	conn := connect(t, p.AdminURL())
	var autovacuum, logMin string
	if err := conn.QueryRow(ctx, "SELECT current_setting('autovacuum'), current_setting('log_autovacuum_min_duration')").Scan(&autovacuum, &logMin); err != nil {
		t.Fatal(err)
	}
	if autovacuum != "on" || logMin != "0" {
		t.Errorf("autovacuum %s, log_autovacuum_min_duration %s; want on and 0", autovacuum, logMin)
	}
	testenv.Eventually(t, 30*time.Second, "the autovacuum launcher runs", func() bool {
		var n int
		return conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum launcher'").Scan(&n) == nil && n == 1
	})
	if err := p.Promote(ctx); !errors.Is(err, errNoStandby) {
		t.Errorf("Promote on a single server: %v, want errNoStandby", err)
	}
	if err := p.PauseStandby(); !errors.Is(err, errNoStandby) {
		t.Errorf("PauseStandby on a single server: %v, want errNoStandby", err)
	}
	if _, err := p.Failover(ctx); !errors.Is(err, errNoStandby) {
		t.Errorf("Failover on a single server: %v, want errNoStandby", err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("the server after the refused failover: %v", err)
	}
	if len(p.LogFiles()) != 1 {
		t.Errorf("log files %v, want one", p.LogFiles())
	}
}
