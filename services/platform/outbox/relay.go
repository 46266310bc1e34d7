package outbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Config tunes a Relay. Zero fields take the defaults of DefaultConfig.
type Config struct {
	ID              string        // this relay's name in claimed_by; default a random UUID
	AppID           string        // the AMQP app_id: the producing service
	BatchSize       int           // rows claimed and published at once (at most broker.MaxBatch)
	Lease           time.Duration // how long a claim keeps other relays off a row
	PollInterval    time.Duration // how often to look without a notification
	MaxAttempts     int           // publishes the broker returned (no queue bound) before a row is parked as dead
	BackoffBase     time.Duration // first retry delay; doubles per attempt, with jitter
	BackoffMax      time.Duration // of a row's retries
	OutageMax       time.Duration // the longest wait between tries while the broker or database is down
	Retention       time.Duration // published rows older than this are deleted
	CleanupInterval time.Duration
	// AfterPublishFailpoint names the failpoint between the broker's confirms and the
	// mark (see RunOnce): the system names its failpoints, the relay only has the
	// window. Empty: none.
	AfterPublishFailpoint string
}

// DefaultConfig is the relay's configuration unless told otherwise.
var DefaultConfig = Config{
	BatchSize:       256,
	Lease:           30 * time.Second,
	PollInterval:    time.Second,
	MaxAttempts:     25,
	BackoffBase:     200 * time.Millisecond,
	BackoffMax:      time.Minute,
	OutageMax:       10 * time.Second,
	Retention:       72 * time.Hour,
	CleanupInterval: time.Minute,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	c.ID = cmp.Or(c.ID, uuid.NewString())
	c.BatchSize = min(cmp.Or(c.BatchSize, d.BatchSize), broker.MaxBatch)
	c.Lease = cmp.Or(c.Lease, d.Lease)
	c.PollInterval = cmp.Or(c.PollInterval, d.PollInterval)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, d.MaxAttempts)
	c.BackoffBase = cmp.Or(c.BackoffBase, d.BackoffBase)
	c.BackoffMax = cmp.Or(c.BackoffMax, d.BackoffMax)
	c.OutageMax = cmp.Or(c.OutageMax, d.OutageMax)
	c.Retention = cmp.Or(c.Retention, d.Retention)
	c.CleanupInterval = cmp.Or(c.CleanupInterval, d.CleanupInterval)
	return c
}

// Relay publishes committed outbox rows to the broker. Several relays may run against one
// database: they claim disjoint batches, and a dead relay's claims expire.
//
// A relay process relays only while it holds its id's advisory lock: it then knows every
// other claim under its id is a dead process's and takes it back at once. A second
// process under a live relay's id refuses to relay (Ready says so): it would publish the
// holder's rows in flight a second time. A return (no queue bound for the event's type)
// spends one of a row's MaxAttempts (out of them, it is parked as dead, its aggregate's
// later events behind it); a failure of the broker, link or database spends none: the
// relay backs off. A nack is no fault of the event either (see broker.ErrNacked): a full
// queue or a quorum queue's leader moving. A nack or a missing queue is its destination's
// refusal, though, not the relay's failure: those rows wait for a retry of their own
// (their available_at) and the others of the batch, and later batches, go on at once.
type Relay struct {
	pool       *pgxpool.Pool
	q          *store.Queries
	pub        *broker.Publisher
	cfg        Config
	token      uuid.UUID               // this process's claims; see ClaimOutbox
	holdsLock  atomic.Bool             // this process holds the relay id's lock: no live twin shares cfg.ID
	twin       atomic.Bool             // another live process holds the relay id's lock
	lockErr    atomic.Pointer[error]   // why the lock connection failed last; nil once it holds the lock
	down       atomic.Pointer[error]   // why the last batch could not run; nil once one ran
	refused    atomic.Pointer[refusal] // the latest destination's refusal, for Ready
	mu         sync.Mutex              // guards refusals
	refusals   map[string]int          // event type: batches in a row whose events of that type were refused
	front      frontier                // where the claim starts
	firstSweep sync.Once               // see runOnce
	log        *slog.Logger
	tracer     trace.Tracer
	m          relayMetrics
}

// leaseMargin is what a lease must leave beyond the longest publish: the claim, the
// mark and a scheduler hiccup on a loaded machine.
const leaseMargin = 5 * time.Second

// markTimeout bounds recording a batch's outcome once shutdown has begun. The broker has
// acked those events: leaving them unmarked would publish them again after the restart.
const markTimeout = 10 * time.Second

// NewRelay returns a relay over pool that publishes through pub. It refuses a lease that
// a publish could outlast: the rows would be taken over and published again by another
// relay while the first still waits for their confirms.
func NewRelay(pool *pgxpool.Pool, pub *broker.Publisher, tel *telemetry.Telemetry, cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if need := pub.MaxDuration() + leaseMargin; cfg.Lease < need {
		return nil, fmt.Errorf("outbox relay: a lease of %v does not outlast a publish (dial and confirm timeout %v, plus %v): use at least %v",
			cfg.Lease, pub.MaxDuration(), leaseMargin, need)
	}
	r := &Relay{
		pool:     pool,
		q:        store.New(pool),
		pub:      pub,
		cfg:      cfg,
		token:    uuid.New(),
		refusals: map[string]int{},
		log:      tel.Logger.With("component", "outbox.relay", "relay_id", cfg.ID),
		tracer:   tel.Tracer("outbox"),
		front:    startFrontier(time.Now()),
	}
	m, err := newRelayMetrics(tel.Meter("outbox"), r.q)
	if err != nil {
		return nil, err
	}
	r.m = m
	return r, nil
}

// ErrTwin is Ready's answer in a process that refuses to relay because another live
// process runs under the same relay id.
var ErrTwin = errors.New("another live process relays under this relay id; this one publishes nothing while that one lives")

// errNoLock is Ready's answer while the relay does not hold its id's lock: before it
// has taken it, or while the connection that holds it is being made again.
var errNoLock = errors.New("the relay does not hold its relay id's lock (yet)")

// Ready reports whether the relay is publishing, for /readyz: it is not while it waits
// for its id's lock (and then names what broke the lock connection), refuses as a twin,
// could not run its last batch (the broker or the database unreachable or refusing, the
// exchange missing), or holds events a destination refused (the broker nacking, a queue
// an event needs missing) until their retry has run.
func (r *Relay) Ready(context.Context) error {
	if r.twin.Load() {
		return fmt.Errorf("relay %s: %w", r.cfg.ID, ErrTwin)
	}
	if err := r.down.Load(); err != nil {
		return *err
	}
	if f := r.refused.Load(); f != nil && time.Now().Before(f.until) {
		return f.err
	}
	if !r.holdsLock.Load() {
		if err := r.lockErr.Load(); err != nil {
			return fmt.Errorf("%w: %w", errNoLock, *err)
		}
		return errNoLock
	}
	return nil
}

// Run publishes until ctx ends. It never returns early on a broker or database outage:
// it logs, backs off (up to OutageMax) and tries again, so the relay heals when they come
// back. It relays only while it holds its id's lock (see Relay).
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.listen(ctx, wake) }()
	go func() { defer wg.Done(); r.sweep(ctx, wake) }()
	defer wg.Wait()

	lock := &wakeLock{config: r.sessionConfig("wake")}
	defer lock.close()
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	cleanup := time.NewTicker(r.cfg.CleanupInterval)
	defer cleanup.Stop()
	failures := 0
	for {
		n, err := 0, error(nil)
		if r.holdsLock.Load() {
			n, err = r.RunOnce(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		var refused refusedError
		switch {
		case errors.As(err, &refused):
			// The refused rows wait for their own retry; nothing else does.
			r.m.outages.Add(ctx, 1)
			r.log.WarnContext(ctx, "a destination refused events; they are retried after their own backoff, no attempt spent", "err", refused.err)
		case err != nil:
			failures++
			r.m.outages.Add(ctx, 1)
			r.log.WarnContext(ctx, "relay cannot publish now; no row's attempts are spent", "err", err, "consecutive_failures", failures)
			if !backoff.Sleep(ctx, backoff.Delay(r.cfg.BackoffBase, r.cfg.OutageMax, failures)) {
				return nil
			}
			continue
		}
		switch {
		case n == r.cfg.BatchSize:
			failures = 0
			continue // more may be waiting: do not sleep on a backlog
		}
		failures = 0
		if err := r.fallAsleep(ctx, lock, n > 0); err != nil {
			continue // the next RunOnce meets the failure, or takes the rows that arrived
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-poll.C:
		case <-cleanup.C:
			if _, err := r.Cleanup(ctx); err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "outbox cleanup failed", "err", err)
			}
		}
		lock.release(ctx)
	}
}

// errRowsArrived: fallAsleep found rows on its last look, and stays awake for them.
var errRowsArrived = errors.New("rows arrived while the relay was going to sleep")

// fallAsleep gets the relay ready to wait for a NOTIFY. It takes the "outbox wake" lock,
// after which every writer notifies; taking it waits for the writers that shared the
// lock, and so will not notify, to commit; then it claims once more, to take their rows.
// Found rows, or any failure, and it stays awake and says why (errRowsArrived, or the
// failure): the caller runs another batch. A lock that does not come within the poll
// interval (a writer's long transaction) ends as a poll would. When another relay of the
// database sleeps holding the lock, this one sleeps without it: writers notify for that
// one, and every relay listening wakes. Unless its last batch had rows (marked): then it
// claims once more all the same, because marking a row makes its aggregate's next row
// claimable, the sleeper's last claim may have found that row still waiting, and no
// writer notifies for it.
func (r *Relay) fallAsleep(ctx context.Context, lock *wakeLock, marked bool) error {
	if !r.holdsLock.Load() {
		return nil // relaying nothing, it has no rows to be woken for
	}
	held, err := lock.hold(ctx, r.cfg.PollInterval)
	if err != nil || (!held && !marked) {
		return err // !held: another relay sleeps holding it, and its wake-ups wake this one too
	}
	n, err := r.RunOnce(ctx)
	if err == nil && n > 0 {
		err = errRowsArrived
	}
	if err != nil {
		lock.release(ctx)
	}
	return err
}

// wakeLock is the connection on which a relay holds the "outbox wake" lock while it
// sleeps (sql/platform/migrations/00004_outbox_wake_only_idle_relays.sql): a connection of
// its own, so that a sleeping relay keeps none from the pool's work, and kept from one
// sleep to the next.
type wakeLock struct {
	config *pgx.ConnConfig
	conn   *pgx.Conn // nil before the first sleep and after a failure
	held   bool
}

// hold takes the lock, waiting at most wait for the writers that share it, and says
// whether it holds it: not when another relay of the database sleeps holding it (the
// sleeper lock, TakeSleeperLock), which writers then wake for both.
func (l *wakeLock) hold(ctx context.Context, wait time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if l.conn == nil {
		conn, err := connectSession(ctx, l.config)
		if err != nil {
			return false, err
		}
		l.conn = conn
	}
	q := store.New(l.conn)
	first, err := q.TakeSleeperLock(ctx)
	if err == nil && first {
		err = q.HoldWakeLock(ctx)
	}
	if err != nil {
		l.close() // the locks may have come with the cancellation: the session ends with them
		return false, err
	}
	l.held = first
	return first, nil
}

// release lets both locks go: writers stop notifying while the relay works.
func (l *wakeLock) release(ctx context.Context) {
	if !l.held {
		return
	}
	l.held = false
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if err := store.New(l.conn).ReleaseWakeLock(ctx); err != nil {
		l.close()
	}
}

// close ends the lock's session, which releases it if it is held.
func (l *wakeLock) close() {
	if l.conn != nil {
		_ = l.conn.Close(context.Background())
	}
	l.conn, l.held = nil, false
}

// listen turns NOTIFY outbox into wake-ups, reconnecting after any error. A missed
// notification costs at most one poll interval.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	failures := 0
	for ctx.Err() == nil {
		started := time.Now()
		err := r.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			failures = 0 // a connection that lasted was healthy: this is a new outage
		}
		failures++
		delay := backoff.Delay(r.cfg.BackoffBase, r.cfg.OutageMax, failures)
		if errors.Is(err, ErrTwin) {
			delay = r.cfg.PollInterval // the lock is free the moment the twin's process ends
		} else {
			err = fmt.Errorf("lock connection: %w", err)
			r.lockErr.Store(&err)
			r.log.DebugContext(ctx, "outbox listener reconnecting", "err", err)
		}
		if !backoff.Sleep(ctx, delay) {
			return
		}
	}
}

// listenOnce also holds the relay id's lock for as long as its connection lives: the one
// process that holds it knows no live twin runs under the same RELAY_ID, and may take
// back at once the claims an earlier process under that id left when it died. Without
// the lock it returns ErrTwin, and listen asks again after a pause.
func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := connectSession(ctx, r.sessionConfig("lock"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	defer r.holdsLock.Store(false)
	locked, err := store.New(conn).TryRelayLock(ctx, r.cfg.ID)
	if err != nil {
		return err
	}
	if locked {
		r.lockErr.Store(nil)
	}
	if !locked && !r.twin.Load() {
		r.log.ErrorContext(ctx, "another live process relays under this RELAY_ID: this one publishes nothing while that one lives (give every relay process an id of its own)")
	}
	r.twin.Store(!locked)
	r.holdsLock.Store(locked)
	if !locked {
		return ErrTwin
	}
	if _, err := conn.Exec(ctx, "LISTEN outbox"); err != nil {
		return err
	}
	notify(wake) // rows committed while no one listened, or claims just made ours
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		notify(wake)
	}
}

// sessionConfig is the configuration of one of the relay's long-lived lock sessions
// (kind "lock" or "wake"): the pool's, with its TCP keepalives on both ends (pgdb's
// bounds), so that a link a NAT or load balancer dropped while idle is found dead in
// seconds by the relay and by the server, and a name no other process's session has, so
// that connectSession can end this process's orphans.
func (r *Relay) sessionConfig(kind string) *pgx.ConnConfig {
	c := r.pool.Config().ConnConfig.Copy()
	c.RuntimeParams["application_name"] = "outbox relay " + kind + " " + r.token.String()
	return c
}

// connectSession opens a lock session and first ends every other session under its name.
// Those are this process's own, given up when their connection broke on this side
// while the server kept them (a NAT's idle timeout): the server would keep them, and
// their locks, until its keepalive gave up, and this process would meanwhile take its
// own orphan for a live twin.
func connectSession(ctx context.Context, config *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, config.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := store.New(conn).EndOrphanedSessions(ctx, config.RuntimeParams["application_name"]); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("end this process's orphaned %q session: %w", config.RuntimeParams["application_name"], err)
	}
	return conn, nil
}

func notify(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default: // a wake-up is already pending; it will see this row too
	}
}

// RunOnce claims one batch, publishes it and records the outcome of every row. It returns
// how many rows it claimed, and an error when the broker or the database failed, or when
// a destination refused some of the rows (a broker.ErrNacked or broker.ErrMissingQueue);
// either way no row's attempts were spent. Ready reports a failure until a batch runs, and
// a refusal until the refused rows' retry has had time to run.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	n, err := r.runOnce(ctx)
	var refused refusedError
	if err != nil && !errors.Is(err, failpoint.ErrInjected) && !errors.As(err, &refused) {
		r.down.Store(&err)
	} else {
		r.down.Store(nil)
	}
	return n, err
}

func (r *Relay) runOnce(ctx context.Context) (int, error) {
	// Rows are not claimed while the broker is known to be down: claiming them would only
	// hold them away from a relay that can publish.
	if err := r.pub.Ready(ctx); err != nil {
		return 0, err
	}
	// A relay driven by RunOnce alone has no sweep beside it, and its frontier starts at
	// the ids made just before it: its first batch looks once from the start of the table
	// for a row left pending from before. A failure (the statement timeout under a long
	// held snapshot) costs that one look, never the claims.
	r.firstSweep.Do(func() { r.sweepBehind(ctx, nil) })
	claimed := time.Now()
	rows, err := r.q.ClaimOutbox(ctx, store.ClaimOutboxParams{
		FromID:       r.claimFrom(ctx, claimed),
		BatchSize:    int32(r.cfg.BatchSize),
		RelayID:      &r.cfg.ID,
		ClaimToken:   r.token,
		ReclaimOwn:   r.holdsLock.Load(),
		LeaseSeconds: r.cfg.Lease.Seconds(),
	})
	if err != nil {
		return 0, fmt.Errorf("claim outbox: %w", r.heldBack(ctx, err))
	}
	if len(rows) == 0 {
		return 0, nil
	}
	// Claimed rows are of distinct aggregates; ids are UUIDv7, so this is write order.
	slices.SortFunc(rows, func(a, b store.ClaimOutboxRow) int { return bytes.Compare(a.ID[:], b.ID[:]) })

	msgs := make([]broker.Message, len(rows))
	spans := make([]trace.Span, len(rows))
	for i, row := range rows {
		msgs[i], spans[i] = r.message(ctx, row)
	}
	// The publish ends before the lease does, so no other relay takes these rows over
	// while their confirms are still on the way.
	pctx, cancel := context.WithDeadline(ctx, claimed.Add(r.cfg.Lease-leaseMargin))
	errs := r.pub.PublishBatch(pctx, msgs)
	cancel()

	// The broker has the acked events now. Dying here, before they are marked, is the
	// window the relay cannot close: after a restart they are claimed and published again
	// with the same ids, and consumers drop the copies. A SIGTERM here must not open it:
	// the outcome is recorded on a context that outlives the caller's, for a bounded time.
	if err := failpoint.Inject(ctx, r.cfg.AfterPublishFailpoint); errors.Is(err, failpoint.ErrInjected) {
		return len(rows), err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	return len(rows), r.record(rctx, rows, errs, spans)
}

// CommitWindow is how long after its id was made a row may still commit: a claim also
// covers the ids made that recently before the frontier's last search. Ids come from the
// writers' clocks, so it also absorbs their skew from the relay's. A row that commits
// later still is covered while its transaction is open (frontier.from), or found by the
// next sweep.
const CommitWindow = 10 * time.Second

// frontierRefresh is how often the frontier is searched again from where it stood; the
// claim between two searches starts at the last one, a little behind.
const frontierRefresh = time.Second

// sweepEvery is how often a running relay looks for the oldest pending row from the
// start of the table, for a row no search from the frontier can find: one made pending
// again (a replay), or committed more than CommitWindow after its id was made by a
// transaction no search saw open (another role's). It looks less often when a
// sweep is slow (a held snapshot: see sweep): sweepShare is the most of the time the
// sweeps may take.
const (
	sweepEvery = time.Second
	sweepShare = 20 // a sweep that took d is followed by a pause of at least sweepShare*d
)

// frontier is where a relay's claim starts: the oldest row that was pending when it last
// looked. Every row before it was published or parked, and stays so but for a replay
// (found by the sweep), so the claim need not step over their index entries. Those entries
// are the cost that grows: a snapshot held for minutes (a long report, a forgotten
// session) keeps every row version it might see, and every index entry pointing at one,
// from cleanup, and a claim from the start of the table walked every entry left since the
// snapshot began: 179 ms after 400,000 rows here, 0.09 ms from the frontier
// (TestAClaimUnderAHeldSnapshotTakesNoLongerAfterRowsPassed), and past the role's 5 s
// statement timeout after a quarter of an hour of a soak.
type frontier struct {
	mu       sync.Mutex
	oldest   uuid.UUID // the oldest pending row found, or, none pending, the floor of the search's commit window
	searched time.Time // when oldest was found (or the relay started)
	writing  time.Time // when the oldest transaction writing at that search began (OldestWriterStart)
}

// startFrontier is a new relay's frontier: as if a search when it started had found
// nothing pending, so its first claims start at the ids made within CommitWindow before.
// Not at the start of the table: under a snapshot held for long, a walk from there steps
// over every entry the snapshot keeps, and a restarted relay's first search ran past the
// statement timeout on every try until the snapshot ended. Rows pending from before are
// found by the first batch's one look from the start (runOnce) or by the sweep.
func startFrontier(now time.Time) frontier {
	return frontier{oldest: IDFloor(now.Add(-CommitWindow)), searched: now, writing: now}
}

// from is where the next claim, or search, starts: the oldest pending row found, or the
// smallest id made within CommitWindow before that search or before the oldest
// transaction then writing began, whichever is oldest. A row that committed after the
// search has an id from then on, however long ago the search was (a broker outage stops
// the claims, and the searches with them), unless a transaction open at the search made
// it earlier: one held open past CommitWindow (a slow commit) would otherwise commit
// rows behind the frontier, which only the sweep finds, and a held snapshot slows the
// sweep to one look every few seconds.
func (f *frontier) from() uuid.UUID {
	from := f.oldest
	for _, t := range []time.Time{f.searched, f.writing} {
		if recent := IDFloor(t.Add(-CommitWindow)); bytes.Compare(recent[:], from[:]) < 0 {
			from = recent
		}
	}
	return from
}

// claimFrom returns the id the next claim starts at (frontier.from), after searching the
// frontier again from there when the last search is older than frontierRefresh. A search
// that fails leaves the frontier as it was: the claim then meets the failure, or goes on
// from there.
func (r *Relay) claimFrom(ctx context.Context, now time.Time) uuid.UUID {
	f := &r.front
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.searched) < frontierRefresh {
		return f.from()
	}
	writing, err := r.q.OldestWriterStart(ctx)
	if err != nil {
		return f.from()
	}
	oldest, err := r.q.OldestPending(ctx, f.from())
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		oldest = IDFloor(now.Add(-CommitWindow))
	case err != nil:
		return f.from()
	}
	if writing.After(now) {
		writing = now // the server's clock ahead of the relay's
	}
	f.oldest, f.searched, f.writing = oldest, now, writing
	return f.from()
}

// sweep looks for the oldest pending row from the start of the table, every sweepEvery
// or after a pause sweepShare times as long as its last look, whichever is longer, until
// ctx ends; it moves the frontier back to that row when it lies behind (one that
// committed late, or an operator's replay of a dead row), and wakes the relay for it. It runs beside the claims,
// never before one: under a held snapshot its walk over every entry since the snapshot
// began may take seconds, or fail at the statement timeout, and the claims go on from
// the frontier meanwhile.
func (r *Relay) sweep(ctx context.Context, wake chan<- struct{}) {
	pause := sweepEvery
	for {
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		start := time.Now()
		r.sweepBehind(ctx, wake)
		pause = max(sweepEvery, sweepShare*time.Since(start))
	}
}

// sweepBehind looks once for the oldest pending row from the start of the table and
// moves the frontier back to it when it lies behind, waking the relay (wake may be nil).
func (r *Relay) sweepBehind(ctx context.Context, wake chan<- struct{}) {
	oldest, err := r.q.OldestPending(ctx, uuid.UUID{})
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
			r.log.WarnContext(ctx, "outbox sweep for rows behind the frontier failed; the claims go on from the frontier", "err", r.heldBack(ctx, err))
		}
		return
	}
	f := &r.front
	f.mu.Lock()
	from := f.from()
	behind := bytes.Compare(oldest[:], from[:]) < 0
	if behind {
		f.oldest = oldest
	}
	f.mu.Unlock()
	if behind && wake != nil {
		notify(wake)
	}
}

// IDFloor is the smallest UUIDv7 made at t or later: its first 48 bits are t in Unix
// milliseconds, and Postgres orders uuids byte by byte.
func IDFloor(t time.Time) uuid.UUID {
	var id uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = 0x70 // version 7
	return id
}

// heldBack adds to a statement the server cancelled at its timeout how old the oldest
// snapshot in the database is, when one is old enough to be the likely cause (a long
// transaction, which may also hold the locks the statement waited for): what readiness
// must name, since the relay's own statement is not at fault.
func (r *Relay) heldBack(ctx context.Context, err error) error {
	if !pgdb.TimedOut(err) {
		return err
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	age, aerr := r.q.OldestSnapshotAge(actx)
	if aerr != nil || age < heldBackAge {
		return err
	}
	return fmt.Errorf("%w (the oldest snapshot held in this database is %d transactions old: find its session by age(backend_xmin) in pg_stat_activity; a long transaction keeps every row version it may see from cleanup, and the relay's statements step over them)", err, age)
}

// heldBackAge is the snapshot age, in transactions, from which heldBack names it: a busy
// relay's own database passes thousands of transactions a minute.
const heldBackAge = 1_000

// refusal is a destination's refusal of events, as Ready reports it while it may last.
type refusal struct {
	err   error
	typ   string    // the event type refused
	until time.Time // by when the refused rows have been tried again
}

// refusedError is RunOnce's error when a destination refused some of the batch and
// nothing else failed: the relay itself can go on.
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }

// refusedByDestination reports whether err is the refusal of one destination (a queue
// that nacks or does not exist) rather than a failure of the broker or the link.
func refusedByDestination(err error) bool {
	return errors.Is(err, broker.ErrNacked) || errors.Is(err, broker.ErrMissingQueue)
}

// record writes the outcome of a published batch. Confirmed rows are marked first: if the
// database fails half-way, what the broker has is already known, and only rows that must
// be tried again are left to their claim.
func (r *Relay) record(ctx context.Context, rows []store.ClaimOutboxRow, errs []error, spans []trace.Span) error {
	var published, released []uuid.UUID
	deferred := map[string][]uuid.UUID{}
	var outage, refused error
	for i, row := range rows {
		switch {
		case errs[i] == nil:
			published = append(published, row.ID)
			r.m.published.Add(ctx, 1)
			r.m.latency.Record(ctx, time.Since(row.CreatedAt).Seconds())
			spans[i].End()
		case refusedByDestination(errs[i]):
			deferred[row.EventType] = append(deferred[row.EventType], row.ID)
			refused = cmp.Or(refused, errs[i])
			spans[i].RecordError(errs[i])
			spans[i].SetStatus(codes.Error, "destination refused")
			spans[i].End()
		case broker.Unavailable(errs[i]):
			released = append(released, row.ID)
			outage = cmp.Or(outage, errs[i])
			spans[i].RecordError(errs[i])
			spans[i].SetStatus(codes.Error, "broker unavailable")
			spans[i].End()
		}
	}
	if len(published) > 0 {
		if _, err := r.q.MarkPublished(ctx, published); err != nil {
			return fmt.Errorf("mark published: %w", err)
		}
	}
	if len(released) > 0 {
		if _, err := r.q.ReleaseClaims(ctx, store.ReleaseClaimsParams{Ids: released, ClaimToken: r.token}); err != nil {
			return fmt.Errorf("release claims: %w", err)
		}
	}
	if err := r.deferRefused(ctx, rows, errs, deferred); err != nil {
		return err
	}
	for i, row := range rows {
		if errs[i] == nil || broker.Unavailable(errs[i]) {
			continue
		}
		spans[i].RecordError(errs[i])
		spans[i].SetStatus(codes.Error, "publish refused")
		spans[i].End()
		r.m.failures.Add(ctx, 1)
		state, err := r.q.RecordPublishFailure(ctx, store.RecordPublishFailureParams{
			ID:             row.ID,
			ClaimToken:     r.token,
			LastError:      ptr(errs[i].Error()),
			BackoffSeconds: backoff.Delay(r.cfg.BackoffBase, r.cfg.BackoffMax, int(row.Attempts)+1).Seconds(),
			MaxAttempts:    int32(r.cfg.MaxAttempts),
		})
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("record publish failure: %w", err)
		}
		if state == "dead" {
			r.log.ErrorContext(ctx, "outbox row parked as dead", "event_id", row.ID, "type", row.EventType, "attempts", row.Attempts+1, "err", errs[i])
		} else {
			r.log.WarnContext(ctx, "publish refused, will retry", "event_id", row.ID, "type", row.EventType, "attempts", row.Attempts+1, "err", errs[i])
		}
	}
	if outage == nil && refused != nil {
		return refusedError{refused}
	}
	return outage
}

// deferRefused puts the rows a destination refused back with a delay that grows with
// each batch in a row that had their event type refused, and forgets the refusals of the
// types that were published.
func (r *Relay) deferRefused(ctx context.Context, rows []store.ClaimOutboxRow, errs []error, deferred map[string][]uuid.UUID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, row := range rows {
		if errs[i] == nil {
			delete(r.refusals, row.EventType)
			if f := r.refused.Load(); f != nil && f.typ == row.EventType {
				r.refused.Store(nil)
			}
		}
	}
	for i, row := range rows {
		ids, ok := deferred[row.EventType]
		if !ok || !refusedByDestination(errs[i]) {
			continue
		}
		delete(deferred, row.EventType)
		r.refusals[row.EventType]++
		delay := backoff.Delay(r.cfg.BackoffBase, r.cfg.OutageMax, r.refusals[row.EventType])
		if _, err := r.q.DeferClaims(ctx, store.DeferClaimsParams{Ids: ids, ClaimToken: r.token, DelaySeconds: delay.Seconds()}); err != nil {
			return fmt.Errorf("defer refused rows: %w", err)
		}
		// Ready reports the refusal until the rows have been claimed and published again.
		r.refused.Store(&refusal{err: errs[i], typ: row.EventType,
			until: time.Now().Add(delay + r.cfg.PollInterval + r.pub.MaxDuration())})
	}
	return nil
}

// message builds the AMQP message for a row and starts its publish span, a child of the
// trace stored when the row was written.
func (r *Relay) message(ctx context.Context, row store.ClaimOutboxRow) (broker.Message, trace.Span) {
	parent := telemetry.Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": row.Traceparent, "tracestate": row.Tracestate})
	ctx, span := r.tracer.Start(parent, row.EventType+" publish",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitmq,
			semconv.MessagingDestinationName(r.pub.Exchange()),
			semconv.MessagingRabbitmqDestinationRoutingKey(row.EventType),
			semconv.MessagingMessageID(row.ID.String()),
			attribute.Int("bookstore.outbox.attempts", int(row.Attempts)),
		))
	pub := broker.EventPublishing(row.ID.String(), row.EventType, r.cfg.AppID, row.CreatedAt, row.Envelope)
	pub.Headers = amqp.Table{}
	carrier := propagation.MapCarrier{}
	telemetry.Propagator.Inject(ctx, carrier)
	for k, v := range carrier {
		pub.Headers[k] = v
	}
	return broker.Message{RoutingKey: row.EventType, Publishing: pub}, span
}

// Cleanup deletes published rows older than the retention period, in batches, in one
// relay at a time (see pgdb.DeleteInBatches).
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	return pgdb.DeleteInBatches(ctx, r.pool, cleanupLockKey, 1000, func(tx pgx.Tx, batch int) (int64, error) {
		return r.q.WithTx(tx).DeletePublished(ctx, store.DeletePublishedParams{
			RetentionSeconds: r.cfg.Retention.Seconds(),
			BatchSize:        int32(batch),
		})
	})
}

// cleanupLockKey is the advisory lock key of outbox clean-up ("outbox" in ASCII).
const cleanupLockKey = 0x6f7574626f78

func ptr[T any](v T) *T { return &v }

type relayMetrics struct {
	published metric.Int64Counter
	failures  metric.Int64Counter
	outages   metric.Int64Counter
	latency   metric.Float64Histogram
}

func newRelayMetrics(m metric.Meter, q *store.Queries) (relayMetrics, error) {
	in := telemetry.NewInstruments(m)
	rm := relayMetrics{
		published: in.Counter("bookstore.outbox.published", "Events the broker confirmed."),
		failures:  in.Counter("bookstore.outbox.publish_failures", "Publishes the broker returned (no queue bound): each spends one of its row's attempts."),
		outages:   in.Counter("bookstore.outbox.relay_outages", "Relay batches that could not run because the broker, the link or the database failed, or the broker nacked; no row's attempts are spent."),
		latency: in.Float64Histogram("bookstore.outbox.publish_latency", "From the outbox row's commit to the broker's confirm.", metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)),
	}
	pending := in.Int64Gauge("bookstore.outbox.pending", "Rows not yet published.")
	dead := in.Int64Gauge("bookstore.outbox.dead", "Rows parked after too many failed publishes.")
	oldest := in.Float64Gauge("bookstore.outbox.oldest_pending_age", "Age of the oldest unpublished row: the relay's lag.", metric.WithUnit("s"))
	if err := in.Err("outbox"); err != nil {
		return rm, err
	}
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := q.OutboxStats(ctx)
		if err != nil {
			return nil // a scrape during an outage shows no value rather than failing
		}
		o.ObserveInt64(pending, s.Pending)
		o.ObserveInt64(dead, s.Dead)
		o.ObserveFloat64(oldest, s.OldestPendingSeconds)
		return nil
	}, pending, dead, oldest)
	return rm, err
}
