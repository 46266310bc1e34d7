package faults

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// LongTxCleanupLimit is how long after a long transaction ends every outbox and inbox
// table must have been vacuumed again (or hold fewer dead tuples than would make
// autovacuum look at it): autovacuum visits each database once per autovacuum_naptime,
// a minute by default, and a vacuum of these tables takes well under a second.
const LongTxCleanupLimit = 2 * time.Minute

// longTxVacuumEvery is how often the fault vacuums the outbox and inbox tables itself
// on a server that runs no autovacuum (this machine's is off, for the benchmarks'
// sake): a stand-in for autovacuum's visits, so that what a vacuum can and cannot
// remove while the snapshot is held is seen either way.
const longTxVacuumEvery = 10 * time.Second

// longTxBaseline is at most how long the fault measures the claim and the publication
// before it opens its snapshots, to compare them with the same figures under them.
const longTxBaseline = 10 * time.Second

// longTxProbeEvery is how often the fault times its probe of the relays' claim.
const longTxProbeEvery = 500 * time.Millisecond

// longTxStartProbeEvery is how often it times the probe from the start of the table
// too: that one steps over every dead entry the snapshot keeps, up to seconds each near
// the end of a long hold, and timed every longTxProbeEvery it took a good part of a core
// of the Postgres it measures.
const longTxStartProbeEvery = 10 * time.Second

// longTxServices are the databases whose queue tables the fault holds back: a snapshot
// holds back vacuum only in its own database, so the fault opens one in each.
var longTxServices = []string{"ordering", "inventory", "notification"}

// claimProbe is the relays' claim (ClaimOutbox) without its locks and its update, from
// the id $1: the walk of the pending rows' index, which steps over every dead entry from
// $1 on that no vacuum could remove and no scan could mark dead (both need the tuple
// dead to every snapshot). The fault runs it from the relays' frontier, as they do, and
// from the start of the table, as they did before the frontier, to show what that saves.
const claimProbe = `
SELECT count(*) FROM (
    SELECT o.id FROM outbox o
    WHERE o.state = 'pending' AND o.id >= $1 AND o.available_at <= now()
      AND (o.claimed_until IS NULL OR o.claimed_until < now())
      AND NOT EXISTS (
          SELECT 1 FROM outbox e
          WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
            AND e.sequence < o.sequence AND e.state <> 'published')
    ORDER BY o.id LIMIT 256) next`

// oldestPending finds the frontier as the relays do (OldestPending): the oldest pending
// row at or after the last one found.
const oldestPending = `SELECT id FROM outbox WHERE state = 'pending' AND id >= $1 ORDER BY id LIMIT 1`

// fromTheStart is the claimTimes key suffix of the probe from the start of the table.
const fromTheStart = " from the start"

// stockProbe is the read of a book's stock every reservation makes (inventory's StockOf),
// for the whole catalogue: the newest of each book's stock levels, found by reading the
// key backwards. A level replaced under the snapshot stays behind the newest; a read that
// walked them (the ten books' rows updated in place did) grows with the hold.
const stockProbe = `
SELECT count(*) FROM books b
CROSS JOIN LATERAL (
    SELECT l.on_hand, l.reserved FROM stock_levels l
    WHERE l.book_id = b.id
    ORDER BY l.version DESC
    LIMIT 1
) s`

// stockKey is the claimTimes key of stockProbe's durations.
const stockKey = "inventory stock"

// queueTables reads the dead tuples of a database's outbox and inbox, the number
// above which autovacuum would vacuum each (its threshold plus its scale factor of the
// rows), and when each was last vacuumed, by anyone.
const queueTables = `
SELECT s.relname, s.n_dead_tup,
       current_setting('autovacuum_vacuum_threshold')::float8
         + current_setting('autovacuum_vacuum_scale_factor')::float8 * greatest(c.reltuples, 0),
       greatest(s.last_vacuum, s.last_autovacuum)
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relname IN ('outbox', 'inbox')`

// tableState is one queue table's dead tuples at one moment.
type tableState struct {
	dead     int64
	trigger  float64   // the dead tuples past which autovacuum vacuums it
	vacuumed time.Time // the last vacuum's end, manual or auto
}

// longTxTables reads every queue table of longTxServices, by "service table".
func (in *Injector) longTxTables(ctx context.Context) (map[string]tableState, error) {
	out := map[string]tableState{}
	for _, svc := range longTxServices {
		rows, err := in.sys.DBs[svc].Query(ctx, queueTables)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", svc, err)
		}
		for rows.Next() {
			var name string
			var s tableState
			var vacuumed *time.Time
			if err := rows.Scan(&name, &s.dead, &s.trigger, &vacuumed); err != nil {
				rows.Close()
				return nil, fmt.Errorf("%s: %w", svc, err)
			}
			if vacuumed != nil {
				s.vacuumed = *vacuumed
			}
			out[svc+" "+name] = s
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", svc, err)
		}
	}
	return out, nil
}

// vacuumQueues vacuums every queue table of longTxServices, as autovacuum would.
func (in *Injector) vacuumQueues(ctx context.Context) error {
	for _, svc := range longTxServices {
		if _, err := in.sys.DBs[svc].Exec(ctx, "VACUUM outbox, inbox"); err != nil {
			return fmt.Errorf("vacuum %s: %w", svc, err)
		}
	}
	return nil
}

// claimTimes are the probe's durations in one phase of the fault, by service (from the
// frontier) and by service + fromTheStart.
type claimTimes map[string][]time.Duration

// frontiers are where each outbox's claim starts, as far as the probe knows: the oldest
// pending row found, or, none pending, the floor of the search's commit window; and when
// the probe last ran from the start of the table.
type frontiers struct {
	id        map[string]uuid.UUID
	fromStart time.Time
}

// probe times one claimProbe on each outbox from its frontier, found again first as the
// relays find theirs (outbox.Relay.claimFrom: from the last frontier, or a commit window
// before the last search, whichever is older), and, once every longTxStartProbeEvery,
// one from the start of the table.
func (in *Injector) probe(ctx context.Context, into claimTimes, f *frontiers) {
	front := f.id
	fromStart := time.Since(f.fromStart) >= longTxStartProbeEvery
	if fromStart {
		f.fromStart = time.Now()
	}
	for _, svc := range []string{"ordering", "inventory"} {
		db := in.sys.DBs[svc]
		now := time.Now()
		var oldest uuid.UUID
		switch err := db.QueryRow(ctx, oldestPending, front[svc]).Scan(&oldest); {
		case errors.Is(err, pgx.ErrNoRows):
			front[svc] = outbox.IDFloor(now.Add(-outbox.CommitWindow))
		case err == nil:
			front[svc] = oldest
		}
		from := front[svc]
		if recent := outbox.IDFloor(now.Add(-outbox.CommitWindow)); bytes.Compare(recent[:], from[:]) < 0 {
			from = recent
		}
		probes := map[string]uuid.UUID{svc: from}
		if fromStart {
			probes[svc+fromTheStart] = uuid.UUID{}
		}
		for key, id := range probes {
			start := time.Now()
			var n int
			if err := db.QueryRow(ctx, claimProbe, id).Scan(&n); err == nil {
				into[key] = append(into[key], time.Since(start))
			}
		}
		front[svc] = from // the next search starts here
	}
	start := time.Now()
	var n int
	if err := in.sys.DBs["inventory"].QueryRow(ctx, stockProbe).Scan(&n); err == nil {
		into[stockKey] = append(into[stockKey], time.Since(start))
	}
}

func (c claimTimes) String() string {
	var parts []string
	for _, key := range []string{"ordering", "inventory", "ordering" + fromTheStart, "inventory" + fromTheStart, stockKey} {
		ts := slices.Sorted(slices.Values(c[key]))
		if len(ts) == 0 {
			parts = append(parts, key+" -")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s/%s", key, ms(ts[len(ts)/2]), ms(ts[len(ts)-1])))
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// publishLatency describes how long the rows both outboxes got between from and to
// waited to be published: the median and the 99th percentile of published_at -
// created_at, and how many of them were still pending.
func (in *Injector) publishLatency(ctx context.Context, from, to time.Time) string {
	var parts []string
	for _, svc := range []string{"ordering", "inventory"} {
		var n, pending int
		var p50, p99 float64
		err := in.sys.DBs[svc].QueryRow(ctx, `
			SELECT count(*), count(*) FILTER (WHERE state <> 'published'),
			       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)), 0),
			       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)), 0)
			FROM outbox WHERE created_at >= $1 AND created_at < $2`, from, to).Scan(&n, &pending, &p50, &p99)
		if err != nil {
			parts = append(parts, svc+" "+err.Error())
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d rows p50 %.0fms p99 %.0fms%s", svc, n, p50*1000, p99*1000,
			map[bool]string{true: fmt.Sprintf(" (%d pending)", pending)}[pending > 0]))
	}
	return strings.Join(parts, ", ")
}

// emailTimes are notification's records created between two moments: how many, and the
// median and 99th percentile of the time each took from its creation to its completion
// (the claim, the provider's call and phase two; no wait in a queue), over those completed.
type emailTimes struct {
	n        int
	p50, p99 time.Duration
}

func (e emailTimes) String() string {
	return fmt.Sprintf("%d records, created → completed p50 %s p99 %s", e.n, ms(e.p50), ms(e.p99))
}

// emailLatency reads notification's emailTimes of the records created in [from, to).
func (in *Injector) emailLatency(ctx context.Context, from, to time.Time) (emailTimes, error) {
	var e emailTimes
	var p50, p99 float64
	err := in.sys.DBs["notification"].QueryRow(ctx, `
		SELECT count(*),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at)), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at)), 0)
		FROM notifications WHERE created_at >= $1 AND created_at < $2`, from, to).Scan(&e.n, &p50, &p99)
	e.p50, e.p99 = time.Duration(p50*float64(time.Second)), time.Duration(p99*float64(time.Second))
	return e, err
}

// LongTxEmailSlowdown is how much slower notification's median record may be under a
// long transaction than before it: both this many times and longTxEmailSlack over the
// median before. The CPU the other queue tables' dead tuples cost shows in it; a query
// that reads an index whole that the snapshot keeps growing (the two-hour soak's fall)
// took it from 16 ms to 280 ms.
const (
	LongTxEmailSlowdown = 3
	longTxEmailSlack    = 50 * time.Millisecond
)

// longTxEmailJudged is the shortest hold longTxEmailVerdict judges: an index the snapshot
// keeps growing costs little in a short one, whose median is a handful of records among
// the other faults' (the smoke run's was 153 ms before its 11 s hold and 52 ms under it).
const longTxEmailJudged = 5 * time.Minute

// longTxEmailVerdict is the check of notification under a long transaction held for
// held: its median record under the snapshot within LongTxEmailSlowdown of the one
// before. A hold shorter than longTxEmailJudged, or too few records on either side (a
// run's load ended, an outage took the time), is no verdict.
func longTxEmailVerdict(held time.Duration, before, during emailTimes) (violation bool, detail string) {
	const enough = 20
	if held < longTxEmailJudged || before.n < enough || during.n < enough {
		return false, ""
	}
	if during.p50 > LongTxEmailSlowdown*before.p50 && during.p50 > before.p50+longTxEmailSlack {
		return true, fmt.Sprintf("notification's median record took %s under the snapshot, %s before it: more than %d× and %s slower",
			ms(during.p50), ms(before.p50), LongTxEmailSlowdown, longTxEmailSlack)
	}
	return false, ""
}

// Stock reads under a long transaction: the median of stockProbe under the snapshot may
// be this many times and longTxStockSlack over the one before. The ten books' rows
// updated in place took a book's lookup from 0.8 ms to 60-270 ms under a 48-minute
// snapshot (the two-hour soak's fall); the newest level read by its key stays near 0.1 ms.
const (
	LongTxStockSlowdown = 3
	longTxStockSlack    = 10 * time.Millisecond
)

// longTxStockVerdict is the check of inventory's stock under a long transaction held for
// held: stockProbe's median under the snapshot within LongTxStockSlowdown of the one
// before. A hold shorter than longTxEmailJudged (too few versions behind the newest to
// tell from a busy machine) or too few probes on either side is no verdict.
func longTxStockVerdict(held time.Duration, before, during []time.Duration) (violation bool, detail string) {
	const enough = 10
	if held < longTxEmailJudged || len(before) < enough || len(during) < enough {
		return false, ""
	}
	median := func(ds []time.Duration) time.Duration { return slices.Sorted(slices.Values(ds))[len(ds)/2] }
	b, d := median(before), median(during)
	if d > LongTxStockSlowdown*b && d > b+longTxStockSlack {
		return true, fmt.Sprintf("a read of every book's stock took %s under the snapshot, %s before it: more than %d× and %s slower",
			ms(d), ms(b), LongTxStockSlowdown, longTxStockSlack)
	}
	return false, ""
}

// longTransaction holds a snapshot open in each service's database (a session of the
// harness's superuser, not of a service's role: a service's own is ended by its role's
// idle_in_transaction_session_timeout, a foreign session is bounded by nothing), for
// f.Duration while the load runs: BEGIN ISOLATION LEVEL REPEATABLE READ, one read of the
// outbox, then idle. Meanwhile every claim and mark leaves a dead tuple in the outbox
// that no vacuum may remove (it is newer than the snapshot's xmin) and no index scan may
// mark dead, so the relays' claims step over more and more of them.
//
// The fault measures, before the snapshot and under it, the time of a probe of the
// claim and how long rows took to be published; the dead tuples of every outbox and
// inbox at the start, at their peak and after a vacuum under the snapshot; and, after it
// ends, how long until every such table has been vacuumed again (by autovacuum, or on a
// server without it by the fault every longTxVacuumEvery). Its check fails when that
// takes longer than LongTxCleanupLimit, or when notification's records or inventory's
// stock reads were much slower under the snapshot (longTxEmailVerdict, longTxStockVerdict). Whether rows kept being published under the
// snapshot is invariant 12's to say: the fault does not strike a relay, so the liveness
// bound holds throughout it.
func (in *Injector) longTransaction(ctx context.Context, f *check.Fault) {
	ctx = context.WithoutCancel(ctx) // once begun, it runs to its end: the snapshots always end
	var autovacuum string
	if err := in.sys.DBs["ordering"].QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum); err != nil {
		in.fail(f, false, "autovacuum: "+err.Error())
		return
	}
	auto := autovacuum == "on"
	// A short hold (a short run's) is vacuumed under it too, at least twice.
	every := min(longTxVacuumEvery, max(f.Duration/3, time.Second)).Round(time.Second)
	cleaner := "autovacuum"
	if !auto {
		cleaner = fmt.Sprintf("the fault's VACUUM every %v (autovacuum is off on this server)", every)
	}

	baseStart := time.Now()
	before, front := claimTimes{}, &frontiers{id: map[string]uuid.UUID{}}
	for time.Since(baseStart) < min(longTxBaseline, f.Duration/3) {
		in.probe(ctx, before, front)
		time.Sleep(longTxProbeEvery)
	}
	start0, err := in.longTxTables(ctx)
	if err != nil {
		in.fail(f, false, "dead tuples: "+err.Error())
		return
	}

	var held []*pgx.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close(ctx)
		}
	}()
	for _, svc := range longTxServices {
		cfg := in.sys.DBs[svc].Config().ConnConfig.Copy()
		cfg.RuntimeParams["application_name"] = "chaos long_transaction"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			held = append(held, conn)
			_, err = conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ")
		}
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1 FROM outbox LIMIT 1")
		}
		if err != nil {
			in.fail(f, false, svc+": open the snapshot: "+err.Error())
			return
		}
	}
	in.begin(f)
	start := time.Now()

	during := claimTimes{}
	peak := map[string]int64{}
	heldVacuum := map[string]tableState{} // each table just after the last vacuum under the snapshot
	seen := func(tables map[string]tableState) {
		for k, s := range tables {
			if s.vacuumed.After(start) && !s.vacuumed.Equal(heldVacuum[k].vacuumed) {
				heldVacuum[k] = s
			}
		}
	}
	lastVacuum := start
	for next := start; time.Since(start) < f.Duration; next = next.Add(longTxProbeEvery) {
		in.probe(ctx, during, front)
		if tables, err := in.longTxTables(ctx); err == nil {
			for k, s := range tables {
				peak[k] = max(peak[k], s.dead)
			}
			seen(tables) // autovacuum's
		}
		if !auto && time.Since(lastVacuum) >= every {
			if err := in.vacuumQueues(ctx); err != nil {
				in.fail(f, true, err.Error())
				return
			}
			lastVacuum = time.Now()
			if tables, err := in.longTxTables(ctx); err == nil {
				seen(tables)
			}
		}
		time.Sleep(time.Until(next.Add(longTxProbeEvery)))
	}
	var xminAge int64
	_ = in.sys.DBs["ordering"].QueryRow(ctx, `SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity WHERE pid = $1`,
		held[0].PgConn().PID()).Scan(&xminAge)
	for _, c := range held {
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			in.fail(f, true, "end the snapshot: "+err.Error())
			return
		}
	}
	end := time.Now()

	// After: until every table has been vacuumed since the end, or is below autovacuum's
	// trigger (nothing for autovacuum to do), with a vacuum of the fault's own on a
	// server without autovacuum.
	after := claimTimes{}
	var cleaned time.Duration = -1
	var last map[string]tableState
	lastVacuum = end.Add(-every / 2) // the first one soon after the end, as a visit of autovacuum's would be
	for time.Since(end) <= LongTxCleanupLimit {
		in.probe(ctx, after, front)
		if !auto && time.Since(lastVacuum) >= every {
			if err := in.vacuumQueues(ctx); err != nil {
				in.fail(f, true, err.Error())
				return
			}
			lastVacuum = time.Now()
		}
		tables, err := in.longTxTables(ctx)
		if err == nil {
			last = tables
			done := true
			for k, s := range tables {
				// Vacuumed since the end (or, with autovacuum, below its trigger: nothing
				// for it to do), and down to what it held before the snapshot.
				visited := s.vacuumed.After(end) || auto && float64(s.dead) <= s.trigger
				if !visited || float64(s.dead) > max(s.trigger, float64(start0[k].dead)) {
					done = false
				}
			}
			if done {
				cleaned = time.Since(end)
				break
			}
		}
		time.Sleep(longTxProbeEvery)
	}

	emailsBefore, errBefore := in.emailLatency(ctx, baseStart, start)
	emailsDuring, errDuring := in.emailLatency(ctx, start, end)

	var dead []string
	for _, k := range slices.Sorted(maps.Keys(start0)) {
		underIt := "no vacuum under it"
		if s, ok := heldVacuum[k]; ok {
			underIt = fmt.Sprintf("%d left by the last vacuum under it", s.dead)
		}
		dead = append(dead, fmt.Sprintf("%s %d→%d (%s)→%d", k, start0[k].dead, peak[k], underIt, last[k].dead))
	}
	note := fmt.Sprintf("snapshots held %.1fs in %s (xmin %d transactions old at the end), cleaned by %s; "+
		"dead tuples at the start→peak under the snapshot→after the cleanup: %s; "+
		"claim probe p50/max before %s, under the snapshot %s, after %s; "+
		"published before: %s; under the snapshot: %s; emails before: %s; under the snapshot: %s",
		end.Sub(start).Seconds(), strings.Join(longTxServices, ", "), xminAge, cleaner, strings.Join(dead, "; "),
		before, during, after, in.publishLatency(ctx, baseStart, start), in.publishLatency(ctx, start, end),
		cmp.Or(errString(errBefore), emailsBefore.String()), cmp.Or(errString(errDuring), emailsDuring.String()))
	in.record(f, true, note)
	in.mu.Lock()
	f.Start, f.End = start, end // record stamps now; the snapshots were held from start to end
	in.mu.Unlock()
	if cleaned < 0 {
		in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.LongTxNotCleaned,
			Detail: fmt.Sprintf("an outbox or inbox table not vacuumed again, or its dead tuples above both autovacuum's trigger and their number before the snapshots, %v after the snapshots ended", LongTxCleanupLimit)})
		return
	}
	if slow, detail := longTxEmailVerdict(end.Sub(start), emailsBefore, emailsDuring); slow && errBefore == nil && errDuring == nil {
		in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.LongTxSlowedEmails, Detail: detail, Drain: cleaned})
		return
	}
	if slow, detail := longTxStockVerdict(end.Sub(start), before[stockKey], during[stockKey]); slow {
		in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.LongTxSlowedStock, Detail: detail, Drain: cleaned})
		return
	}
	in.setCheck(f, check.FaultCheck{Checked: true, Drain: cleaned})
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
