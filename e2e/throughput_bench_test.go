package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// Orders per run. The system does some 100-300 orders/s on a 2-core machine, so each run
// is several seconds to half a minute of steady load: long enough that warming up
// (connections, the first batches, Postgres's caches) is a small part of it, short enough
// that the whole benchmark stays under about three minutes. BENCH_ORDERS=n posts n orders
// in each of the larger runs, and a third of that at concurrency 1, for a quick run.
const (
	ordersAtOne  = 1000 // the run at concurrency 1: every order waits for the one before
	ordersAtMany = 3000 // the runs at 16 and 64, and the bare pipeline
)

// concurrencies are the client's closed loops: one order at a time, where every step's
// latency shows; then 16 and 64 at once, more than ordering's database pool has
// connections, where the system's throughput shows.
var concurrencies = []int{1, 16, 64}

// The orders go round-robin over 20 books, ids 1-20 (the seeded catalogue's ten and ten
// more), so concurrent reservations seldom wait on one row's lock; each book has
// 10,000,000 copies, so every order is confirmed and none is rejected.
const (
	benchBooks = 20
	benchStock = 10_000_000
)

// settleTimeout is how long the system may take, after the last POST answered, to decide
// every order and send every email: far more than it needs, so a timeout is a defect.
const settleTimeout = 2 * time.Minute

// cpuColumns are the processes each order's CPU is charged to, in the table's order.
var cpuColumns = []string{"ordering", "inventory", "notification", "emailprovider", "postgres", "rabbitmq", "client"}

// ownBackends is the column of the Postgres backends of the benchmark's own databases, a
// part of the postgres column: the part other users of the server cannot inflate.
const ownBackends = "pg-own-backends"

// providerBackends is the part of ownBackends that serves the provider stand-in's
// database: in production, someone else's machine.
const providerBackends = "pg-provider-backends"

// BenchmarkSystemThroughput starts the four services as real processes, with the
// settings `make run` gives them, and drives them with a closed-loop client at
// concurrency 1, 16 and 64: each of its workers posts a one-line order, and the next as
// soon as the answer came; then with an open-loop client offering half the emailed rate
// of the run at 64, one order every so often whatever the answers, where latency is
// measured without a backlog. A run ends when every order is decided and every email
// sent. It reports how fast orders are accepted, decided and emailed, the latency of each step,
// and the CPU each process spent per order; and, as the baseline of the same run, how
// fast the bare pipeline underneath (an outbox write, the relay, a consumer behind an
// inbox, in this process) moves orders.
//
// The databases are the measuring instrument: the benchmark reads the orders' and the
// emails' timestamps there, and polls only them while it waits, never the services.
//
// It takes a few minutes and measures once, whatever b.N or -benchtime asks:
//
//	go test -count=1 -run '^$' -bench BenchmarkSystemThroughput -benchtime=1x -timeout 20m ./e2e/
//
// BENCH_ORDERS=300 in front of it makes a quick run.
func BenchmarkSystemThroughput(b *testing.B) {
	var r *throughput
	// b.Loop calls this function once; the guard makes one measurement even when
	// -benchtime asks for more iterations.
	for b.Loop() {
		if r == nil {
			r = measureThroughput(b)
		}
	}
	// To stdout, not b.Log: the testing package cuts a benchmark's log to its first lines.
	// -bench shows a package's output even when it passes.
	fmt.Fprint(os.Stdout, r.table())
	r.reportMetrics(b)
}

// throughput is what one benchmark measured.
type throughput struct {
	runs []systemRun
	half systemRun // the open-loop run at half the widest run's emailed rate
	bare bareRun
	shed int64 // POSTs ordering answered 503 with Retry-After (sent again after it)
}

func measureThroughput(b *testing.B) *throughput {
	one, many := orderCounts(b)
	r := &throughput{}
	// The baseline first, before the services start: nothing of the system runs beside it.
	r.bare = runBarePipeline(b, many, inventoryConcurrency(b))

	// startSystem's settings are make run's: LOG_LEVEL=info is the default, and
	// OTEL_BSP_SCHEDULE_DELAY means nothing without an exporter. No faults, no failpoints.
	// An empty DATABASE_MAX_CONNS gives each service its own default pool, not the small
	// one tests get.
	asMakeRun := map[string]string{"DATABASE_MAX_CONNS": ""}
	s := startSystem(b, map[string]map[string]string{
		"ordering": asMakeRun, "inventory": asMakeRun, "notification": asMakeRun, "emailprovider": asMakeRun,
	})
	for i := 1; i <= benchBooks; i++ {
		s.setStock(bookID(i), fmt.Sprintf("Benchmark book %d", i), benchStock)
	}
	l := newLoad(b, s, slices.Max(concurrencies))
	total := 0
	for _, c := range concurrencies {
		orders := many
		if c == 1 {
			orders = one
		}
		total += orders
		r.runs = append(r.runs, l.run(func() (systemRun, []string, time.Time) { return l.post(c, orders) }, total))
	}
	// Latency where it matters: at half the capacity just measured, offered at a steady
	// rate whatever the answers, as customers arrive, so that no backlog hides in the
	// figure and none is built.
	half := rate(r.widest().orders, r.widest().lastEmailed) / 2
	total += many / 2
	r.half = l.run(func() (systemRun, []string, time.Time) { return l.postAtRate(half, many/2) }, total)
	r.shed = l.shed.Load()
	return r
}

// orderCounts returns the orders of the run at concurrency 1 and of each larger run.
func orderCounts(b *testing.B) (one, many int) {
	many = ordersAtMany
	if v := os.Getenv("BENCH_ORDERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 3 {
			b.Fatalf("BENCH_ORDERS=%q: want a number of orders, at least 3", v)
		}
		many = n
	}
	return many * ordersAtOne / ordersAtMany, many
}

// systemRun is one closed-loop run against the system.
type systemRun struct {
	concurrency, orders int
	perSecond           float64         // the open-loop run's offered rate; 0 for a closed loop
	posting             time.Duration   // the first POST to the last answer
	post                []time.Duration // each POST's latency, as the client saw it
	decided, emailed    []time.Duration // each order's placed→decided and placed→emailed
	lastDecided         time.Duration   // the first POST to the last decision
	lastEmailed         time.Duration   // the first POST to the last email completed
	cpu                 map[string]time.Duration
}

// load is the client and the instrument of the system's runs.
type load struct {
	b       *testing.B
	sys     *system
	client  *http.Client
	bodies  [][]byte // one order body per book
	keys    string   // the prefix of this benchmark's idempotency keys
	db      map[string]*pgxpool.Pool
	charged map[string]func(procCPU) bool // cpuColumns -> which processes they are
	shed    atomic.Int64                  // POSTs answered 503 with Retry-After, and sent again
	// since is the smallest id of the benchmark's own orders and emails (UUIDv7s, made
	// after it), zero unless the databases hold history from before the benchmark
	// (BenchmarkSystemWithAWeekOfHistory): the counts leave out what is below it.
	since uuid.UUID
}

func newLoad(b *testing.B, s *system, maxConcurrency int) *load {
	// Enough idle connections for every worker: otherwise the client opens and closes
	// connections under load and measures itself.
	transport := &http.Transport{MaxIdleConns: maxConcurrency, MaxIdleConnsPerHost: maxConcurrency}
	b.Cleanup(transport.CloseIdleConnections)
	l := &load{
		b:      b,
		sys:    s,
		client: &http.Client{Transport: transport, Timeout: time.Minute},
		keys:   testenv.Name("bench"),
		db:     map[string]*pgxpool.Pool{},
	}
	for i := 1; i <= benchBooks; i++ {
		body, _ := json.Marshal(map[string]any{"customer_email": "reader@example.com", "lines": []line{{bookID(i), 1}}})
		l.bodies = append(l.bodies, body)
	}
	for _, name := range []string{"ordering", "notification", "emailprovider"} {
		l.db[name] = testenv.Pool(b, s.DB[name])
	}
	l.charged = sharedProcesses(b, l.db["ordering"], slices.Collect(maps.Values(s.DB))...)
	l.charged[providerBackends] = backendsOf(s.DB["emailprovider"])
	for _, name := range services {
		// startSystem keeps the pid to itself; the binary's path, unique to this test
		// binary's build, finds the process.
		pid, err := pidOf(testenv.Build(b, "github.com/bookstore-go/bookstore/services/"+name+"/cmd/"+name))
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		l.charged[name] = func(p procCPU) bool { return p.pid == pid }
	}
	return l
}

// sharedProcesses returns the processes beside the services that an order costs CPU in:
// the Postgres server of db (its postmaster and every child: backends, the WAL writer,
// the checkpointer, ...), the RabbitMQ node (its Erlang VM), and this process (the client
// and the poller); and, as ownBackends, the backends of the benchmark's own databases.
// Other servers on the machine are left out, such as the throwaway brokers some tests
// start, and so are RabbitMQ's command-line tools, Erlang VMs too.
func sharedProcesses(b *testing.B, db *pgxpool.Pool, ownDatabases ...string) map[string]func(procCPU) bool {
	var backend int
	if err := db.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	postmaster, err := parentOf(backend)
	if err != nil {
		b.Fatalf("the postmaster: %v", err)
	}
	var nodes []struct {
		OSPid string `json:"os_pid"`
	}
	if err := (broker.Management{URL: testenv.ManagementURL()}).Do(context.Background(), http.MethodGet, "/api/nodes", "", &nodes); err != nil {
		b.Fatalf("the RabbitMQ node: %v", err)
	}
	var brokers []int
	for _, n := range nodes {
		pid, err := strconv.Atoi(n.OSPid)
		if err != nil {
			b.Fatalf("the RabbitMQ node's os_pid %q: %v", n.OSPid, err)
		}
		brokers = append(brokers, pid)
	}
	return map[string]func(procCPU) bool{
		"postgres":  func(p procCPU) bool { return p.pid == postmaster || p.ppid == postmaster },
		"rabbitmq":  func(p procCPU) bool { return slices.Contains(brokers, p.pid) },
		"client":    func(p procCPU) bool { return p.pid == os.Getpid() },
		ownBackends: backendsOf(ownDatabases...),
	}
}

// run posts orders with post and waits until the system has dealt with them; total is the
// number of orders of this and every earlier run.
func (l *load) run(post func() (systemRun, []string, time.Time), total int) systemRun {
	before := sampleCPU()
	r, ids, start := post()
	l.waitSettled(total)
	after := sampleCPU()
	r.cpu = map[string]time.Duration{}
	for name, match := range l.charged {
		r.cpu[name] = after.cpuSince(before, match)
	}
	l.readTimes(&r, ids, start)
	l.checkExactlyOnce(ids, total)
	return r
}

// post is the closed-loop client: concurrency workers, each posting one order at a time,
// until orders have been placed. It returns what the client measured, the orders' ids
// and the time of the first POST.
func (l *load) post(concurrency, orders int) (systemRun, []string, time.Time) {
	r := systemRun{concurrency: concurrency, orders: orders, post: make([]time.Duration, orders)}
	ids := make([]string, orders)
	var next atomic.Int64
	var failure atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for failure.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= orders {
					return
				}
				if err := l.placeNth(&r, ids, fmt.Sprintf("c%d", concurrency), i); err != nil {
					failure.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	r.posting = time.Since(start)
	if err := failure.Load(); err != nil {
		l.b.Fatalf("concurrency %d: %v", concurrency, *err)
	}
	return r, ids, start
}

// postAtRate is the open-loop client: it starts a POST every 1/perSecond seconds,
// whether the earlier ones have been answered or not, until orders have been placed.
func (l *load) postAtRate(perSecond float64, orders int) (systemRun, []string, time.Time) {
	r := systemRun{perSecond: perSecond, orders: orders, post: make([]time.Duration, orders)}
	ids := make([]string, orders)
	interval := time.Duration(float64(time.Second) / perSecond)
	var failure atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < orders && failure.Load() == nil; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		wg.Go(func() {
			if err := l.placeNth(&r, ids, "open", i); err != nil {
				failure.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	r.posting = time.Since(start)
	if err := failure.Load(); err != nil {
		l.b.Fatalf("%.0f orders/s: %v", perSecond, *err)
	}
	return r, ids, start
}

// placeNth places a run's order i, recording its POST's latency in r and its id in ids;
// run names the run in the order's idempotency key.
func (l *load) placeNth(r *systemRun, ids []string, run string, i int) error {
	sent := time.Now()
	id, err := l.placeOrder(fmt.Sprintf("%s-%s-%d", l.keys, run, i), l.bodies[i%benchBooks])
	r.post[i] = time.Since(sent)
	ids[i] = id
	return err
}

// placeOrder posts one order and returns its id. A 503 with Retry-After (ordering shed
// the request before doing anything: docs/problems.md#overloaded) is sent again with the
// same key after the wait it asks for, as a well-behaved client would; the POST's latency
// then includes the wait. On a quiet machine it does not happen; on a busy one a stall
// of the whole machine can hold every connection past ORDERING_POOL_WAIT.
func (l *load) placeOrder(key string, body []byte) (string, error) {
	for shed := 0; ; shed++ {
		id, retryAfter, err := l.postOrder(key, body)
		if retryAfter == "" || shed == 10 {
			return id, err
		}
		secs, _ := strconv.Atoi(retryAfter)
		time.Sleep(time.Duration(max(secs, 1)) * time.Second)
	}
}

// postOrder is one POST /orders; retryAfter is set when the answer was a 503 with
// Retry-After.
func (l *load) postOrder(key string, body []byte) (id, retryAfter string, err error) {
	req, err := http.NewRequest(http.MethodPost, l.sys.URL["ordering"]+"/orders", bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := l.client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body) // read to the end, so the connection is reused
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
		l.shed.Add(1)
		return "", resp.Header.Get("Retry-After"), fmt.Errorf("POST /orders: %d %s", resp.StatusCode, answer)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("POST /orders: %d %s", resp.StatusCode, answer)
	}
	var o order
	if err := json.Unmarshal(answer, &o); err != nil {
		return "", "", fmt.Errorf("POST /orders: %v: %s", err, answer)
	}
	return o.ID, "", nil
}

// waitSettled polls ordering's and notification's databases until total orders are
// decided and total emails completed. It counts the benchmark's own orders only (since),
// by their ids' index: a count of a week of history every 100 ms would load the system
// it measures.
func (l *load) waitSettled(total int) {
	deadline := time.Now().Add(settleTimeout)
	for {
		decided := testenv.Count(l.b, l.db["ordering"], "SELECT count(*) FROM orders WHERE id >= $1 AND status <> 'pending'", l.since)
		emailed := testenv.Count(l.b, l.db["notification"], "SELECT count(*) FROM notifications WHERE order_id >= $1 AND status = 'completed'", l.since)
		if decided >= total && emailed >= total {
			return
		}
		if time.Now().After(deadline) {
			l.b.Fatalf("%v after the last POST: %d of %d orders decided, %d of %d emails completed",
				settleTimeout, decided, total, emailed, total)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readTimes reads when each order was placed, decided and emailed. Every time is
// Postgres's now() (the writing transaction's start) on this machine's clock, which the
// client's clock shares: orders.created_at is set when the order is placed, updated_at
// when its outcome is applied (nothing else updates an order), and
// notifications.completed_at when the provider has the email.
func (l *load) readTimes(r *systemRun, ids []string, start time.Time) {
	ctx := context.Background()
	placed := map[string]time.Time{}
	rows, err := l.db["ordering"].Query(ctx, "SELECT id::text, status, created_at, updated_at FROM orders WHERE id = ANY($1::uuid[])", ids)
	if err != nil {
		l.b.Fatal(err)
	}
	var last time.Time
	for rows.Next() {
		var id, status string
		var created, updated time.Time
		if err := rows.Scan(&id, &status, &created, &updated); err != nil {
			l.b.Fatal(err)
		}
		if status != "confirmed" {
			l.b.Fatalf("order %s is %s: every book has stock enough, want confirmed", id, status)
		}
		placed[id] = created
		r.decided = append(r.decided, updated.Sub(created))
		last = later(last, updated)
	}
	if err := rows.Err(); err != nil {
		l.b.Fatal(err)
	}
	r.lastDecided = last.Sub(start)

	rows, err = l.db["notification"].Query(ctx, "SELECT order_id::text, completed_at FROM notifications WHERE order_id = ANY($1::uuid[]) AND status = 'completed'", ids)
	if err != nil {
		l.b.Fatal(err)
	}
	last = time.Time{}
	for rows.Next() {
		var id string
		var completed time.Time
		if err := rows.Scan(&id, &completed); err != nil {
			l.b.Fatal(err)
		}
		r.emailed = append(r.emailed, completed.Sub(placed[id]))
		last = later(last, completed)
	}
	if err := rows.Err(); err != nil {
		l.b.Fatal(err)
	}
	r.lastEmailed = last.Sub(start)
	if len(r.decided) != len(ids) || len(r.emailed) != len(ids) {
		l.b.Fatalf("%d orders posted: %d found decided, %d with a completed email", len(ids), len(r.decided), len(r.emailed))
	}
}

// checkExactlyOnce checks that each of the run's orders got exactly one email: one
// completed notification record, and one email at the provider, delivered once, under the
// record's key; and that no other record or email exists beyond one per order placed so
// far (total), so no order got a second email under another key. History from before
// the benchmark (below since) is not counted.
func (l *load) checkExactlyOnce(ids []string, total int) {
	ctx := context.Background()
	rows, err := l.db["notification"].Query(ctx, "SELECT idempotency_key FROM notifications WHERE order_id = ANY($1::uuid[]) AND status = 'completed'", ids)
	if err != nil {
		l.b.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		l.b.Fatal(err)
	}
	var emails, deliveredOnce int
	// By the account's keys (the unique index), not by the key alone, which would read
	// every email the provider holds.
	err = l.db["emailprovider"].QueryRow(ctx,
		"SELECT count(*), count(*) FILTER (WHERE deliveries = 1) FROM emails WHERE account = 'bookstore' AND idempotency_key = ANY($1)", keys).Scan(&emails, &deliveredOnce)
	if err != nil {
		l.b.Fatal(err)
	}
	records := testenv.Count(l.b, l.db["notification"], "SELECT count(*) FROM notifications WHERE order_id >= $1", l.since)
	allEmails := testenv.Count(l.b, l.db["emailprovider"], "SELECT count(*) FROM emails WHERE id >= $1", l.since)
	if len(keys) != len(ids) || emails != len(ids) || deliveredOnce != len(ids) || records != total || allEmails != total {
		l.b.Fatalf("%d orders: %d completed records, %d emails under their keys, %d of them delivered once; "+
			"%d records and %d emails in all, want %d of each", len(ids), len(keys), emails, deliveredOnce, records, allEmails, total)
	}
}

// bareRun is the baseline: the pipeline the system is built on, in this process, with
// nothing of the system's own: no HTTP, no validation or idempotency keys, no stock, no
// second hop, no email.
type bareRun struct {
	orders int
	took   time.Duration // the first commit to the last order consumed
	cpu    map[string]time.Duration
}

// bareSchema is the least the bare pipeline writes: an order-like row per order placed,
// and a row per order consumed.
const bareSchema = `
CREATE TABLE orders (
    id             uuid PRIMARY KEY,
    customer_email text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE reservations (order_id uuid PRIMARY KEY);`

// bareWriters is the bare pipeline's closed loop, the system's largest concurrency.
const bareWriters = 64

// runBarePipeline places orders from bareWriters closed-loop writers, each order one
// transaction of an order row and its OrderPlaced outbox row (outbox.Write); one relay
// publishes them, and one consumer with inventory's concurrency takes each through the
// inbox with one insert as its work. It measures from the first commit to the last order
// consumed. Writers and relay share one pool and the consumer has one of its own, as
// ordering and inventory do; both are in one database of its own, on a vhost of its own.
func runBarePipeline(b *testing.B, orders, concurrency int) bareRun {
	ctx, stop := context.WithCancel(context.Background())
	admin, dbURL := testenv.Database(b, "bare")
	pool, err := pgdb.Open(ctx, admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, bareSchema); err != nil {
		b.Fatal(err)
	}
	consumerPool := testenv.Pool(b, dbURL)
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "bare", LogLevel: "info", Stdout: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	amqpURL := testenv.VHost(b)

	pubConn := broker.NewConn(amqpURL, "bare-publish")
	defer pubConn.Close()
	pub := broker.NewPublisher(pubConn, contracts.Topology, 10*time.Second) // RELAY_CONFIRM_TIMEOUT's default
	defer pub.Close()
	relay, err := outbox.NewRelay(pool, pub, tel, outbox.Config{AppID: "bare"})
	if err != nil {
		b.Fatal(err)
	}
	consumeConn := broker.NewConn(amqpURL, "bare-consume")
	defer consumeConn.Close()
	consumed := &countdown{total: int64(orders), done: make(chan struct{})}
	c, err := consumer.New(consumeConn, tel, consumer.Config{
		Name: "bare", Queue: contracts.QueueInventoryOrderPlaced, Topology: contracts.Topology, Types: []string{contracts.OrderPlaced},
		Concurrency: concurrency, Healthy: consumerPool.Ping, Producer: testenv.Login(amqpURL), // prefetch and retries: the defaults, as inventory's
	}, consumed.handler(consumerPool))
	if err != nil {
		b.Fatal(err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for name, run := range map[string]func(context.Context) error{"relay": relay.Run, "consumer": c.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				b.Errorf("bare pipeline's %s: %v", name, err)
			}
		})
	}
	testenv.Eventually(b, 30*time.Second, "the bare consumer consuming", func() bool { return c.Ready(ctx) == nil })
	charged := sharedProcesses(b, pool, dbURL)

	before := sampleCPU()
	first := placeBare(b, pool, orders)
	select {
	case <-consumed.done:
	case <-time.After(settleTimeout):
		b.Fatalf("bare pipeline: %d of %d orders consumed", consumed.n.Load(), orders)
	}
	after := sampleCPU()
	r := bareRun{orders: orders, took: consumed.last.Sub(first), cpu: map[string]time.Duration{}}
	for name, match := range charged {
		r.cpu[name] = after.cpuSince(before, match)
	}
	return r
}

// placeBare is the bare pipeline's writers; it returns the time of the first commit.
func placeBare(b *testing.B, pool *pgxpool.Pool, orders int) time.Time {
	ctx := context.Background()
	var next atomic.Int64
	var failure atomic.Pointer[error]
	var firstCommit time.Time
	var once sync.Once
	var wg sync.WaitGroup
	for range bareWriters {
		wg.Go(func() {
			for failure.Load() == nil && next.Add(1) <= int64(orders) {
				if err := placeBareOrder(ctx, pool); err != nil {
					failure.CompareAndSwap(nil, &err)
					return
				}
				once.Do(func() { firstCommit = time.Now() })
			}
		})
	}
	wg.Wait()
	if err := failure.Load(); err != nil {
		b.Fatalf("bare pipeline: %v", *err)
	}
	return firstCommit
}

// placeBareOrder is ordering's transaction without the request around it: the order and
// the event that announces it, committed together.
func placeBareOrder(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id string
		if err := tx.QueryRow(ctx, "INSERT INTO orders (id, customer_email) VALUES (gen_random_uuid(), $1) RETURNING id::text", "reader@example.com").Scan(&id); err != nil {
			return err
		}
		_, err := outbox.Write(ctx, tx, outbox.Event{
			Source: "bookstore/ordering", Type: contracts.OrderPlaced, AggregateType: "order", AggregateID: id, Sequence: 1,
			Data: map[string]any{"order_id": id, "customer_email": "reader@example.com", "placed_at": time.Now().UTC(),
				"lines": []line{{bookID(1), 1}}},
		})
		return err
	})
}

// countdown counts the orders the bare consumer processed, and closes done at the last.
type countdown struct {
	total int64
	n     atomic.Int64
	last  time.Time // when the last was processed; read after done
	done  chan struct{}
}

// handler is the bare consumer's work: the inbox claim and one insert, in one transaction.
func (c *countdown) handler(pool *pgxpool.Pool) consumer.Handler {
	return func(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
		processed, err := inbox.Process(ctx, pool, "bare", env, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO reservations (order_id) VALUES ($1)", env.Subject)
			return err
		})
		if err != nil {
			return 0, err
		}
		if !processed {
			return inbox.Duplicate, nil
		}
		if c.n.Add(1) == c.total {
			c.last = time.Now()
			close(c.done)
		}
		return inbox.Processed, nil
	}
}

// inventoryConcurrency is the consumer concurrency inventory runs with by default, read
// from `inventory --help`, so the baseline follows when the default changes. Inventory
// leaves the prefetch to the consumer's default, as the bare consumer does.
func inventoryConcurrency(b *testing.B) int {
	bin := testenv.Build(b, "github.com/bookstore-go/bookstore/services/inventory/cmd/inventory")
	out, err := exec.Command(bin, "--help").Output()
	if err != nil {
		b.Fatalf("inventory --help: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "CONSUMER_CONCURRENCY" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				b.Fatalf("inventory --help: %q: %v", line, err)
			}
			return n
		}
	}
	b.Fatalf("inventory --help names no CONSUMER_CONCURRENCY:\n%s", out)
	return 0
}

// table is the report a person reads.
func (t *throughput) table() string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "concurrency\torders\taccepted/s\tdecided/s\temailed/s\tPOST p50/p99 ms\tplaced→decided p50/p99 ms\tplaced→emailed p50/p99 ms")
	for _, r := range t.all() {
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\n", r.name(), r.orders,
			rate(r.orders, r.posting), rate(r.orders, r.lastDecided), rate(r.orders, r.lastEmailed),
			p50p99(r.post), p50p99(r.decided), p50p99(r.emailed))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU ms/order\t"+strings.Join(cpuColumns, "\t")+"\ttotal\t"+ownBackends+"\t"+providerBackends)
	for _, r := range t.all() {
		fmt.Fprintf(w, "%s", r.name())
		var sum time.Duration
		for _, name := range cpuColumns {
			fmt.Fprintf(w, "\t%.2f", perOrder(r.cpu[name], r.orders))
			sum += r.cpu[name]
		}
		fmt.Fprintf(w, "\t%.2f\t%.2f\t%.2f\n", perOrder(sum, r.orders), perOrder(r.cpu[ownBackends], r.orders), perOrder(r.cpu[providerBackends], r.orders))
	}
	_ = w.Flush()
	br := t.bare
	fmt.Fprintf(&sb, "\nbare pipeline (%d writers, %d orders): %.0f orders/s; CPU ms/order postgres %.2f (%s %.2f), rabbitmq %.2f, client %.2f\n",
		bareWriters, br.orders, rate(br.orders, br.took), perOrder(br.cpu["postgres"], br.orders),
		ownBackends, perOrder(br.cpu[ownBackends], br.orders), perOrder(br.cpu["rabbitmq"], br.orders), perOrder(br.cpu["client"], br.orders))
	fmt.Fprintf(&sb, "system emailed/s at %d / bare = %.2f\n", t.widest().concurrency, t.systemOverBare())
	fmt.Fprintf(&sb, "CPU ms/order at %d, the system without the provider stand-in (its process and %s) and the client: %.2f; the stand-in: %.2f\n",
		t.widest().concurrency, providerBackends, t.widest().systemCPU(), t.widest().providerCPU())
	fmt.Fprintf(&sb, "POSTs shed by ordering (503 with Retry-After, sent again after it): %d\n", t.shed)
	sb.WriteString("CPU: /proc/<pid>/stat from the first POST until the poller saw the run settled. postgres is the\n" +
		"server's every process, less backends that started and ended within the run; " + ownBackends + " is the part\n" +
		"of it spent by the backends of this benchmark's databases, " + providerBackends + " the part of that of the\n" +
		"provider stand-in's database. rabbitmq is the broker's Erlang VM. Both count what\n" +
		"other users of the servers make them do. client is this process, the poller included.\n")
	return sb.String()
}

func (t *throughput) reportMetrics(b *testing.B) {
	widest, first := t.widest(), t.runs[0]
	b.ReportMetric(rate(widest.orders, widest.lastEmailed), fmt.Sprintf("c%d-emailed-orders/s", widest.concurrency))
	b.ReportMetric(ms(percentile(first.post, 0.50)), fmt.Sprintf("c%d-post-p50-ms", first.concurrency))
	b.ReportMetric(perOrder(widest.cpu["postgres"], widest.orders), fmt.Sprintf("c%d-postgres-cpu-ms/order", widest.concurrency))
	b.ReportMetric(t.systemOverBare(), "system/bare")
	b.ReportMetric(widest.systemCPU(), fmt.Sprintf("c%d-cpu-ms/order", widest.concurrency))
	b.ReportMetric(widest.providerCPU(), fmt.Sprintf("c%d-provider-cpu-ms/order", widest.concurrency))
	b.ReportMetric(ms(percentile(t.half.emailed, 0.99)), "half-max-emailed-p99-ms")
}

// all is every run, the closed loops and then the open one.
func (t *throughput) all() []systemRun { return append(slices.Clone(t.runs), t.half) }

// name is how the tables call a run: its concurrency, or its offered rate.
func (r systemRun) name() string {
	if r.perSecond > 0 {
		return fmt.Sprintf("%.0f/s", r.perSecond)
	}
	return strconv.Itoa(r.concurrency)
}

// systemCPU is the CPU per order of every process of the system but the provider
// stand-in, which in production is someone else's machine: the services, Postgres less
// the stand-in's backends, and RabbitMQ; the client is not the system either.
func (r systemRun) systemCPU() float64 {
	var sum time.Duration
	for _, name := range cpuColumns {
		if name != "emailprovider" && name != "client" {
			sum += r.cpu[name]
		}
	}
	return perOrder(sum-r.cpu[providerBackends], r.orders)
}

// providerCPU is the provider stand-in's CPU per order: its process and its database's
// backends.
func (r systemRun) providerCPU() float64 {
	return perOrder(r.cpu["emailprovider"]+r.cpu[providerBackends], r.orders)
}

// widest is the run at the highest concurrency, the one compared with the bare pipeline.
func (t *throughput) widest() systemRun { return t.runs[len(t.runs)-1] }

func (t *throughput) systemOverBare() float64 {
	w := t.widest()
	return rate(w.orders, w.lastEmailed) / rate(t.bare.orders, t.bare.took)
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func perOrder(cpu time.Duration, orders int) float64 { return ms(cpu) / float64(orders) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func p50p99(ds []time.Duration) string {
	return fmt.Sprintf("%.1f/%.1f", ms(percentile(ds, 0.50)), ms(percentile(ds, 0.99)))
}

// percentile is the nearest-rank percentile: the smallest value at least p of ds are at or
// below.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ds))
	return sorted[max(0, int(math.Ceil(p*float64(len(sorted))))-1)]
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
