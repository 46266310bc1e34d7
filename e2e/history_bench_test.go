package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/testenv/cluster"
	"github.com/bookstore-go/bookstore/testenv/plan"
)

// BenchmarkSystemWithAWeekOfHistory measures whether the system stays as fast once its
// tables hold what a busy week leaves behind: the emailed orders/s of
// BenchmarkSystemThroughput's closed-loop run at concurrency 64, first on empty tables,
// then on the same databases holding 10 million rows of history. The goal is a ratio
// history/empty of 0.9 or more; the benchmark reports it and does not fail on it.
//
// The databases are on a Postgres server of the benchmark's own, with the server's
// defaults (autovacuum on) as production has them; the machine's own server runs with
// autovacuum off. The history is copies of the rows the first order of the run on empty
// tables left in every table of every service, with their ids, times, keys and texts
// moved to orders placed evenly over the week before the benchmark began: each table gets
// the rows one real order leaves, in the same proportions, with valid foreign keys and
// UUIDv7 ids made at their time. The benchmark then waits until autovacuum has analysed
// every table it filled, as it would have during a real week.
//
// Retention is part of the cost. Nothing deleted the history while it was written, so
// the published outbox rows older than 72 hours and the Idempotency-Keys older than 24
// hours wait for their jobs, which first run a minute after a service starts. Each run
// is on freshly started services and begins a second before that minute is up: with the
// history, the jobs delete their whole backlog under load, the worst case, not the few
// rows a minute of steady state. The benchmark reports the history rows they deleted
// during the run, and, from Postgres's statistics, the rows sequential scans read in
// each filled table meanwhile: a hot query that reads a table whole shows there.
//
// With the full history it takes 20 to 30 minutes on a two-core machine, most of it the
// fill (about a minute per million rows) and autovacuum's first pass over the filled
// tables, and it measures once, whatever b.N or -benchtime asks:
//
//	go test -count=1 -run '^$' -bench BenchmarkSystemWithAWeekOfHistory -benchtime=1x -timeout 60m ./e2e/
//
// HISTORY_ROWS=200000 BENCH_ORDERS=300 in front of it makes a quick run (about four
// minutes). Without Postgres 15's binaries, the postgres OS user or root, it is skipped
// outside CI, as the cluster tests are.
func BenchmarkSystemWithAWeekOfHistory(b *testing.B) {
	var r *historyRuns
	for b.Loop() {
		if r == nil {
			r = measureWithHistory(b)
		}
	}
	fmt.Fprint(os.Stdout, r.table())
	r.reportMetrics(b)
}

// The history's size and shape.
const (
	defaultHistoryRows = 10_000_000
	historyWeek        = 7 * 24 * time.Hour
	// historyGap keeps the history's last rows an hour older than the benchmark's first:
	// the load tells its own orders and emails from the history's by their ids (load.since),
	// and an email of the history is made seconds after its order.
	historyGap = time.Hour
	// historyChunk is the most rows one statement of the fill writes: each statement
	// takes a second or two on a busy machine, under the services' statement timeout.
	historyChunk = 20_000
	// historyCustomers is how many customers the history's orders come from.
	historyCustomers = 100_000
)

// analyseTimeout bounds the wait for autovacuum to analyse the filled tables. Its
// launcher visits each database once a minute (autovacuum_naptime) and ANALYZE samples
// 30,000 rows whatever the table's size; a vacuum first, of a table that took millions of
// rows, is what takes minutes.
const analyseTimeout = 15 * time.Minute

// statsFlush is how long Postgres 15 may take to count a backend's reads in
// pg_stat_user_tables once it is idle (PGSTAT_IDLE_INTERVAL, 10 s).
const statsFlush = 11 * time.Second

// keySweepInterval is how often ordering forgets old Idempotency-Keys: at its start,
// then every minute (cmd/ordering). The relays clean their outbox every
// outbox.DefaultConfig.CleanupInterval, the first time that long after they start.
const keySweepInterval = time.Minute

// forgetKeysLock is the advisory lock ordering's key sweep takes without waiting
// (orders.forgetKeysLockKey, "idemkey"): held, the sweep deletes nothing. The benchmark
// holds it across the restart, so the sweep's run at start-up leaves the backlog to its
// first tick, with the relays' clean-ups.
const forgetKeysLock = 0x6964656d6b6579

// historyTables are the tables an order leaves rows in, database by database, each after
// the tables its foreign keys name; of finds the first order's rows in it through an
// index, by the ids and key in braces (templateOrder). retention is the condition, on
// the column its retention job's index orders, of the rows that job deletes once they
// are older than retainedFor. The inbox keeps rows 14 days, twice the history's week:
// its clean-up finds none.
var historyTables = []historyTable{
	{db: "ordering", table: "orders", of: "id = {order}"},
	{db: "ordering", table: "order_lines", of: "order_id = {order}"},
	{db: "ordering", table: "order_history", of: "order_id = {order}"},
	{db: "ordering", table: "idempotency_keys", of: "key = {key}",
		retention: "created_at < $1", retainedFor: 24 * time.Hour},
	{db: "ordering", table: "outbox", of: "id = {placed}",
		retention: "state = 'published' AND published_at < $1", retainedFor: outbox.DefaultConfig.Retention},
	{db: "ordering", table: "inbox", of: "message_id = {reserved}",
		retention: "processed_at < $1", retainedFor: inbox.Retention},
	{db: "inventory", table: "inbox", of: "message_id = {placed}",
		retention: "processed_at < $1", retainedFor: inbox.Retention},
	{db: "inventory", table: "order_answers", of: "order_id = {order}"},
	{db: "inventory", table: "reservations", of: "order_id = {order}"},
	{db: "inventory", table: "outbox", of: "id = {reserved}",
		retention: "state = 'published' AND published_at < $1", retainedFor: outbox.DefaultConfig.Retention},
	{db: "notification", table: "inbox", of: "message_id = {reserved}",
		retention: "processed_at < $1", retainedFor: inbox.Retention},
	{db: "notification", table: "notifications", of: "order_id = {order}"},
	{db: "emailprovider", table: "emails", of: "id = {email}"},
}

// historyTable is one table the history fills, and what the benchmark learns of it.
type historyTable struct {
	db, table, of         string
	retention             string
	retainedFor           time.Duration
	perOrder              int       // rows the first order left in it
	filled                time.Time // when its last row was written
	analysed              time.Time // autovacuum's first ANALYZE after that
	due, deleted, overdue int       // history rows past retention before the run, deleted during it, still past it after
	before, after         tableStats
}

func (t *historyTable) name() string { return t.db + "." + t.table }

// tableStats is a table's line of pg_stat_user_tables.
type tableStats struct {
	seqScans, seqRead, autovacuums int64
}

// historyRuns is what one benchmark measured.
type historyRuns struct {
	empty, week     systemRun
	rows, orders    int           // the history's
	perOrder        int           // rows one order leaves in all
	fill            time.Duration // writing the history
	longest         time.Duration // the fill's longest statement
	longestIn       string        // its table
	analysed        time.Duration // from the end of the fill until autovacuum had analysed every table
	retentionWindow time.Duration // from the run's start (the retention jobs may begin) until the history rows were counted after it
	tables          []*historyTable
}

func measureWithHistory(b *testing.B) *historyRuns {
	if err := cluster.PostgresAvailable(); err != nil {
		testenv.Unavailable(b, "Postgres 15", err)
	}
	ctx := b.Context()
	_, many := orderCounts(b)
	concurrency := slices.Max(concurrencies)
	pg, err := cluster.StartPostgresAlone(ctx, "", "history")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("Postgres:\n%s", pg.Logs())
		}
		_ = pg.Close()
	})
	amqpURL := testenv.VHost(b)
	// As BenchmarkSystemThroughput runs them: make run's settings, each service its
	// default pool; each with its own role and database on the benchmark's server.
	serversOf := func(name string) servers {
		return servers{DatabaseURL: pg.URL(name, name), AdminURL: pg.AdminURL(), AMQPURL: amqpURL,
			Extra: map[string]string{"DATABASE_MAX_CONNS": ""}}
	}
	begun := time.Now()
	since := outbox.IDFloor(begun)
	r := &historyRuns{}
	for _, t := range historyTables {
		r.tables = append(r.tables, &t)
	}
	// Each run is on freshly started services, and begins a second before the first tick
	// of their retention jobs, a minute after the start: the same for both runs, but for
	// the history.
	start := func() (l *load, firstTick time.Time) {
		started := time.Now()
		l = newLoad(b, startServices(b, amqpURL, serversOf), concurrency)
		l.since = since
		return l, started.Add(min(keySweepInterval, outbox.DefaultConfig.CleanupInterval))
	}

	l, firstTick := start()
	for i := 1; i <= benchBooks; i++ {
		l.sys.setStock(bookID(i), fmt.Sprintf("Benchmark book %d", i), benchStock)
	}
	time.Sleep(time.Until(firstTick.Add(-time.Second)))
	r.empty = l.run(func() (systemRun, []string, time.Time) { return l.post(concurrency, many) }, many)
	// Nothing of the system runs while the history is written: its retention jobs would
	// delete the history as it arrives.
	for _, name := range slices.Backward(services) {
		l.sys.procs[name].Stop(b)
	}

	h := newHistory(b, pg, since, begun)
	r.rows = historyRows(b)
	r.fill = h.fill(r)
	r.analysed = h.waitAnalysed(r.tables)

	keys, err := pgx.Connect(ctx, pg.URL("postgres", "ordering"))
	if err != nil {
		b.Fatal(err)
	}
	defer keys.Close(context.Background())
	if _, err := keys.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(forgetKeysLock)); err != nil {
		b.Fatal(err)
	}
	l, firstTick = start()
	time.Sleep(time.Until(firstTick.Add(-5 * time.Second)))
	heldBefore, dueBefore, _ := h.countRetention(r.tables)
	statsBefore := h.stats(r.tables)
	time.Sleep(time.Until(firstTick.Add(-time.Second)))
	if _, err := keys.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(forgetKeysLock)); err != nil {
		b.Fatal(err)
	}
	unlocked := time.Now()
	r.week = l.run(func() (systemRun, []string, time.Time) { return l.post(concurrency, many) }, 2*many)
	heldAfter, dueAfter, counted := h.countRetention(r.tables)
	r.retentionWindow = counted.Sub(unlocked)
	time.Sleep(statsFlush)
	statsAfter := h.stats(r.tables)
	for _, t := range r.tables {
		t.due, t.deleted, t.overdue = dueBefore[t], heldBefore[t]-heldAfter[t], dueAfter[t]
		t.before, t.after = statsBefore[t], statsAfter[t]
	}
	return r
}

// historyRows is HISTORY_ROWS, or the default.
func historyRows(b *testing.B) int {
	v := os.Getenv("HISTORY_ROWS")
	if v == "" {
		return defaultHistoryRows
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1000 {
		b.Fatalf("HISTORY_ROWS=%q: want a number of rows, at least 1000", v)
	}
	return n
}

// history writes and watches the history of the benchmark's databases, through one
// superuser connection to each.
type history struct {
	b      *testing.B
	conns  map[string]*pgx.Conn
	since  uuid.UUID // the benchmark's own orders' ids are at or above it
	begun  time.Time
	tmpl   templateOrder
	orders int
}

func newHistory(b *testing.B, pg *cluster.Postgres, since uuid.UUID, begun time.Time) *history {
	h := &history{b: b, conns: map[string]*pgx.Conn{}, since: since, begun: begun}
	for _, name := range services {
		conn, err := pgx.Connect(b.Context(), pg.URL("postgres", name))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close(context.Background()) })
		// The benchmark's own statements read by index, so that every sequential scan
		// pg_stat_user_tables counts during the run is the system's; JIT compiling takes
		// longer than the fill's statements save by it; the statement timeout is a guard
		// only, each statement takes a second or two.
		for _, set := range []string{"SET enable_seqscan = off", "SET jit = off", "SET statement_timeout = '1min'"} {
			if _, err := conn.Exec(b.Context(), set); err != nil {
				b.Fatal(err)
			}
		}
		h.conns[name] = conn
	}
	h.tmpl = h.readTemplate()
	return h
}

// templateOrder is the first order of the run on empty tables, by the ids and values
// through which its rows name it: every row of the history is a copy of one of its rows,
// these moved to another order.
type templateOrder struct {
	order, placed, reserved, email, book uuid.UUID // placed, reserved: its two events
	customer, key, trace                 string    // trace: the trace id of its traceparents
	at                                   time.Time // when it was placed
	placedAfter, reservedAfter           time.Duration
	emailAfter                           time.Duration
}

func (h *history) readTemplate() templateOrder {
	ctx := h.b.Context()
	var t templateOrder
	var placedAt, reservedAt, emailAt time.Time
	var email string
	err := h.conns["ordering"].QueryRow(ctx, `
		SELECT o.id, o.customer_email, o.created_at, l.book_id, k.key, x.id, x.created_at, split_part(x.traceparent, '-', 2)
		FROM orders o JOIN order_lines l ON l.order_id = o.id JOIN idempotency_keys k ON k.order_id = o.id
		JOIN outbox x ON x.aggregate_id = o.id::text
		WHERE o.id >= $1 ORDER BY o.id, l.book_id LIMIT 1`, h.since).
		Scan(&t.order, &t.customer, &t.at, &t.book, &t.key, &t.placed, &placedAt, &t.trace)
	if err == nil {
		err = h.conns["inventory"].QueryRow(ctx, "SELECT id, created_at FROM outbox WHERE aggregate_id = $1", t.order.String()).Scan(&t.reserved, &reservedAt)
	}
	if err == nil {
		err = h.conns["notification"].QueryRow(ctx, "SELECT provider_email_id FROM notifications WHERE order_id = $1", t.order).Scan(&email)
	}
	if err == nil {
		t.email, err = uuid.Parse(email)
	}
	if err == nil {
		err = h.conns["emailprovider"].QueryRow(ctx, "SELECT created_at FROM emails WHERE id = $1", t.email).Scan(&emailAt)
	}
	if err != nil {
		h.b.Fatalf("the first order's rows, the history's template: %v", err)
	}
	t.placedAfter, t.reservedAfter, t.emailAfter = placedAt.Sub(t.at), reservedAt.Sub(t.at), emailAt.Sub(t.at)
	if last := slices.Max([]time.Duration{t.placedAfter, t.reservedAfter, t.emailAfter}); last > historyGap/2 {
		h.b.Fatalf("the template order %s was emailed %v after it was placed: its copies would reach the benchmark's own ids", t.order, last)
	}
	return t
}

// fill writes the history, table after table, and returns how long it took; r gets its
// longest statement. Each table gets the rows the template order left in it for each
// order of the history: HISTORY_ROWS rows in all, over rows/perOrder orders placed
// evenly over the week before the benchmark began.
func (h *history) fill(r *historyRuns) time.Duration {
	ctx := h.b.Context()
	r.perOrder = 0
	for _, t := range r.tables {
		t.perOrder = h.count(t.db, "SELECT count(*) FROM "+t.table+" WHERE "+h.template(t.of))
		r.perOrder += t.perOrder
	}
	h.orders = max(1, r.rows/r.perOrder)
	r.orders = h.orders
	inserts := map[*historyTable]string{}
	for _, t := range r.tables {
		inserts[t] = h.insert(t)
	}
	start := time.Now()
	exec := func(db, table, sql string, args ...any) {
		began := time.Now()
		if _, err := h.conns[db].Exec(ctx, sql, args...); err != nil {
			h.b.Fatalf("fill the history: %s: %v\n%s", db, err, sql)
		}
		if took := time.Since(began); took > r.longest {
			r.longest, r.longestIn = took, db+"."+table
		}
	}
	for _, t := range r.tables {
		step := max(1, historyChunk/t.perOrder)
		for first := 0; first < h.orders; first += step {
			exec(t.db, t.table, inserts[t], first, min(first+step, h.orders)-1)
		}
		t.filled = time.Now()
	}
	// The books' reserved counts take the history's reservations, as each reservation
	// did (in the one live level of each book).
	exec("inventory", "stock_levels", `UPDATE stock_levels l SET reserved = l.reserved + r.quantity
		FROM (SELECT book_id, sum(quantity) AS quantity FROM reservations WHERE order_id < $1 GROUP BY book_id) r
		WHERE l.book_id = r.book_id`, h.since)
	return time.Since(start)
}

// template puts the template order's ids into a condition of historyTables.
func (h *history) template(cond string) string {
	t := h.tmpl
	return strings.NewReplacer("{order}", quote(t.order.String()), "{placed}", quote(t.placed.String()),
		"{reserved}", quote(t.reserved.String()), "{email}", quote(t.email.String()), "{key}", quote(t.key)).Replace(cond)
}

// insert is the statement that writes t's rows of the history's orders $1 to $2: a copy
// of each of the template order's rows for each order g, each column moved to g by its
// type. An id becomes g's, a time keeps its distance from the template's placement, a
// text has the template's ids, customer, key, trace and times replaced by g's, a hash is
// made anew; numbers and states stay as they are.
func (h *history) insert(t *historyTable) string {
	rows, err := h.conns[t.db].Query(h.b.Context(), `
		SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, t.table)
	if err != nil {
		h.b.Fatal(err)
	}
	m := h.tmpl
	var names, values []string
	for rows.Next() {
		var column, typ string
		if err := rows.Scan(&column, &typ); err != nil {
			h.b.Fatal(err)
		}
		name := pgx.Identifier{column}.Sanitize()
		v := "tm." + name
		switch {
		case typ == "uuid":
			v = fmt.Sprintf("CASE %s WHEN %s THEN v.o WHEN %s THEN v.p WHEN %s THEN v.r WHEN %s THEN v.e WHEN %s THEN v.bk ELSE %[1]s END",
				v, quote(m.order.String()), quote(m.placed.String()), quote(m.reserved.String()), quote(m.email.String()), quote(m.book.String()))
		case typ == "timestamp with time zone":
			v = fmt.Sprintf("v.t + (%s - %s)", v, timeLiteral(m.at))
		case typ == "text":
			v = h.swap(v)
		case typ == "json" || typ == "jsonb":
			v = h.swap(v+"::text") + "::" + typ
		case typ == "bytea" && strings.HasSuffix(column, "_hash"):
			v = "sha256(" + v + " || int8send(g))"
		case typ == "bytea": // a response body, JSON
			v = "convert_to(" + h.swap("convert_from("+v+", 'UTF8')") + ", 'UTF8')"
		}
		names, values = append(names, name), append(values, v)
	}
	if err := rows.Err(); err != nil {
		h.b.Fatal(err)
	}
	return fmt.Sprintf("INSERT INTO %s (%s)\nSELECT %s\nFROM generate_series($1::bigint, $2::bigint) g\n%s\nCROSS JOIN (SELECT * FROM %s WHERE %s) tm",
		t.table, strings.Join(names, ", "), strings.Join(values, ", "), h.order(), t.table, h.template(t.of))
}

// order is the FROM item v of order g of the history, computed once per order (OFFSET
// 0 keeps the planner from copying its expressions into every use): t, when it was
// placed, and ts, that time as the services write it in JSON; o, p, r and e, the ids of
// the order, of its two events and of its email, UUIDv7s made at their times (the
// first 48 bits the milliseconds, the rest from a hash of what it is and of g: the same
// in every database); bk, its book, round-robin over the benchmark's as its orders go;
// cu, one of historyCustomers; k, its Idempotency-Key; tr, its trace id.
func (h *history) order() string {
	m := h.tmpl
	step := float64((historyWeek - historyGap).Microseconds()) / float64(h.orders)
	id := func(seed string, after time.Duration) string {
		return fmt.Sprintf("(lpad(to_hex(floor(extract(epoch FROM t + interval '%d microseconds') * 1000)::bigint), 12, '0') || "+
			"'7' || substr(md5('%s ' || g), 1, 3) || '8' || substr(md5('%[2]s ' || g), 4, 15))::uuid", after.Microseconds(), seed)
	}
	return fmt.Sprintf(`CROSS JOIN LATERAL (
	SELECT t, to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS ts,
	       %s AS o, %s AS p, %s AS r, %s AS e,
	       (%s || lpad((g %% %d + 1)::text, 12, '0'))::uuid AS bk,
	       replace(%s, '@', '-' || g %% %d || '@') AS cu, md5('key ' || g)::uuid::text AS k, md5('trace ' || g) AS tr
	FROM (SELECT %s + interval '1 microsecond' * (%f * (g + 0.5)) AS t) placed OFFSET 0) v`,
		id("order", 0), id("placed", m.placedAfter), id("reserved", m.reservedAfter), id("email", m.emailAfter),
		quote(strings.TrimSuffix(bookID(0), "000000000000")), benchBooks,
		quote(m.customer), historyCustomers, timeLiteral(h.begun.Add(-historyWeek)), step)
}

// swap is the text expression s with the template order's ids, customer, key and trace
// replaced by order v's, and every time in it (RFC 3339, as JSON has them) by v's
// placement.
func (h *history) swap(s string) string {
	m := h.tmpl
	for _, r := range []struct{ from, to string }{
		{m.order.String(), "v.o::text"}, {m.placed.String(), "v.p::text"}, {m.reserved.String(), "v.r::text"},
		{m.email.String(), "v.e::text"}, {m.book.String(), "v.bk::text"},
		{m.customer, "v.cu"}, {m.key, "v.k"}, {m.trace, "v.tr"},
	} {
		if r.from != "" {
			s = fmt.Sprintf("replace(%s, %s, %s)", s, quote(r.from), r.to)
		}
	}
	return fmt.Sprintf(`regexp_replace(%s, '[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z', v.ts, 'g')`, s)
}

func timeLiteral(t time.Time) string {
	return quote(t.UTC().Format(time.RFC3339Nano)) + "::timestamptz"
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// count runs a count on db's connection.
func (h *history) count(db, sql string, args ...any) int {
	var n int
	if err := h.conns[db].QueryRow(h.b.Context(), sql, args...).Scan(&n); err != nil {
		h.b.Fatalf("%s: %s: %v", db, sql, err)
	}
	return n
}

// waitAnalysed waits until autovacuum has analysed every table the history filled since
// it was filled, and returns how long after the fill's end it was done.
func (h *history) waitAnalysed(tables []*historyTable) time.Duration {
	var end time.Time
	for _, t := range tables {
		end = later(end, t.filled)
	}
	deadline := end.Add(analyseTimeout)
	for {
		var waiting []string
		for db, conn := range h.conns {
			last := map[string]time.Time{}
			rows, err := conn.Query(h.b.Context(), "SELECT relname, coalesce(last_autoanalyze, 'epoch') FROM pg_stat_user_tables")
			if err != nil {
				h.b.Fatal(err)
			}
			for rows.Next() {
				var table string
				var at time.Time
				if err := rows.Scan(&table, &at); err != nil {
					h.b.Fatal(err)
				}
				last[table] = at
			}
			if err := rows.Err(); err != nil {
				h.b.Fatal(err)
			}
			for _, t := range tables {
				if t.db != db {
					continue
				}
				if t.analysed = last[t.table]; !t.analysed.After(t.filled) {
					waiting = append(waiting, t.name())
				}
			}
		}
		if len(waiting) == 0 {
			var done time.Time
			for _, t := range tables {
				done = later(done, t.analysed)
			}
			return done.Sub(end)
		}
		if time.Now().After(deadline) {
			slices.Sort(waiting)
			h.b.Fatalf("%v after the fill, autovacuum has not analysed %s", analyseTimeout, strings.Join(waiting, ", "))
		}
		time.Sleep(2 * time.Second)
	}
}

// countRetention counts, in each table a retention job cleans, the history's rows and
// those of them past retention, and returns when it was done.
func (h *history) countRetention(tables []*historyTable) (held, due map[*historyTable]int, at time.Time) {
	held, due = map[*historyTable]int{}, map[*historyTable]int{}
	for _, t := range tables {
		if t.retention == "" {
			continue
		}
		sql := "SELECT count(*) FROM " + t.table + " WHERE " + t.retention
		held[t] = h.count(t.db, sql, h.begun)
		due[t] = h.count(t.db, sql, time.Now().Add(-t.retainedFor))
	}
	return held, due, time.Now()
}

// stats reads each table's line of pg_stat_user_tables.
func (h *history) stats(tables []*historyTable) map[*historyTable]tableStats {
	out := map[*historyTable]tableStats{}
	for _, t := range tables {
		var st tableStats
		err := h.conns[t.db].QueryRow(h.b.Context(), `
			SELECT seq_scan, seq_tup_read, autovacuum_count
			FROM pg_stat_user_tables WHERE relname = $1`, t.table).Scan(&st.seqScans, &st.seqRead, &st.autovacuums)
		if err != nil {
			h.b.Fatalf("%s: pg_stat_user_tables: %v", t.name(), err)
		}
		out[t] = st
	}
	return out
}

// ratio is the emailed orders/s of the run with a week of history over that of the
// run on empty tables: the goal is 0.9 or more.
func (r *historyRuns) ratio() float64 {
	return rate(r.week.orders, r.week.lastEmailed) / rate(r.empty.orders, r.empty.lastEmailed)
}

// deleted is the history rows the retention jobs deleted during the run.
func (r *historyRuns) deleted() int {
	n := 0
	for _, t := range r.tables {
		n += t.deleted
	}
	return n
}

// table is the report a person reads.
func (r *historyRuns) table() string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	runs := []struct {
		name string
		run  systemRun
	}{{"empty", r.empty}, {"a week", r.week}}
	fmt.Fprintln(w, "tables\tconcurrency\torders\taccepted/s\tdecided/s\temailed/s\tPOST p50/p99 ms\tplaced→decided p50/p99 ms\tplaced→emailed p50/p99 ms")
	for _, x := range runs {
		fmt.Fprintf(w, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\n", x.name, x.run.concurrency, x.run.orders,
			rate(x.run.orders, x.run.posting), rate(x.run.orders, x.run.lastDecided), rate(x.run.orders, x.run.lastEmailed),
			p50p99(x.run.post), p50p99(x.run.decided), p50p99(x.run.emailed))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU ms/order\t"+strings.Join(cpuColumns, "\t")+"\ttotal")
	for _, x := range runs {
		fmt.Fprintf(w, "%s", x.name)
		var sum time.Duration
		for _, name := range cpuColumns {
			fmt.Fprintf(w, "\t%.2f", perOrder(x.run.cpu[name], x.run.orders))
			sum += x.run.cpu[name]
		}
		fmt.Fprintf(w, "\t%.2f\n", perOrder(sum, x.run.orders))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "table\trows/order\thistory rows\tanalysed s after its fill\tseq scans in run\trows they read\t\tautovacuums in run\tpast retention before\tdeleted in run\tpast retention after")
	var whole []string
	for _, t := range r.tables {
		scans, read := t.after.seqScans-t.before.seqScans, t.after.seqRead-t.before.seqRead
		mark := ""
		if rows := t.perOrder * r.orders; rows >= plan.Rows && read >= int64(rows) {
			mark = "read whole"
			whole = append(whole, t.name())
		}
		retention := "\t-\t-\t-"
		if t.retention != "" {
			retention = fmt.Sprintf("\t%d\t%d\t%d", t.due, t.deleted, t.overdue)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%.0f\t%d\t%d\t%s\t%d%s\n", t.name(), t.perOrder, t.perOrder*r.orders,
			t.analysed.Sub(t.filled).Seconds(), scans, read, mark, t.after.autovacuums-t.before.autovacuums, retention)
	}
	_ = w.Flush()
	rows := r.perOrder * r.orders
	fmt.Fprintf(&sb, "\nhistory: %d rows, %d per order, %d orders over the week before the run on empty tables; "+
		"filled in %.1f s (%.1f s per million rows; longest statement %.2f s, %s); every table analysed by autovacuum %.0f s after the fill\n",
		rows, r.perOrder, r.orders, r.fill.Seconds(), r.fill.Seconds()/float64(rows)*1e6, r.longest.Seconds(), r.longestIn, r.analysed.Seconds())
	fmt.Fprintf(&sb, "retention: %d history rows deleted in the %.1f s from the run's start until they were counted after it: %.0f rows/s, %.0f per order placed\n",
		r.deleted(), r.retentionWindow.Seconds(), float64(r.deleted())/r.retentionWindow.Seconds(), float64(r.deleted())/float64(r.week.orders))
	if len(whole) > 0 {
		fmt.Fprintf(&sb, "READ WHOLE during the run: %s\n", strings.Join(whole, ", "))
	}
	fmt.Fprintf(&sb, "emailed orders/s with a week of history / on empty tables = %.2f (goal ≥ 0.9)\n", r.ratio())
	fmt.Fprintf(&sb, "Both runs on freshly started services, a second before their retention jobs' first tick, on a Postgres\n"+
		"server of the benchmark's own (autovacuum on). Seq scans: pg_stat_user_tables from the run's start until its\n"+
		"statistics were flushed, the benchmark's look-ups of the run's orders after the last email included. A table\n"+
		"under %d rows (plan.Rows) is small enough that the planner may rightly read it whole.\n", plan.Rows)
	return sb.String()
}

func (r *historyRuns) reportMetrics(b *testing.B) {
	b.ReportMetric(rate(r.empty.orders, r.empty.lastEmailed), "empty-emailed-orders/s")
	b.ReportMetric(rate(r.week.orders, r.week.lastEmailed), "history-emailed-orders/s")
	b.ReportMetric(r.ratio(), "history/empty")
	b.ReportMetric(float64(r.deleted())/r.retentionWindow.Seconds(), "retention-deleted-rows/s")
	b.ReportMetric(r.fill.Seconds()/float64(r.perOrder*r.orders)*1e6, "fill-s/Mrows")
}
