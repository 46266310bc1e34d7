package experiment

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// livenessInterval is how often the sampler reads each outbox and its relays' /readyz.
const livenessInterval = 300 * time.Millisecond

// livenessWaiting is how many of the longest-waiting claimable rows a sample keeps.
const livenessWaiting = 5

// sampleFrontier is where a service's samples start their look for pending rows, as the
// relays' claim starts at their frontier (outbox's frontier). Under a snapshot held for
// minutes every row pending since it began keeps an entry in outbox_ready, and a look
// from the start of the table steps over them all: 20 minutes into a soak's long
// transaction, 270-480 ms a look, three looks a second in each database, most of a core
// of the Postgres the run measures. A sample looks from the start of the table once
// every fullLookEvery at most, and after a look that took d not before fullLookShare × d
// (as the relays' sweep paces itself); in between it starts at the oldest pending row
// the last such look found, or at the ids made within outbox.CommitWindow before it,
// whichever is older. A row committed longer than that after its id was made (a late
// commit) is seen by the next look from the start.
type sampleFrontier struct {
	oldest   uuid.UUID     // the oldest pending row the last look from the start found; none pending: the floor of its commit window
	lookedAt time.Time     // when that look began; zero before the first
	pause    time.Duration // from lookedAt to the next look from the start
}

const (
	fullLookEvery = time.Second
	fullLookShare = 20
)

// from is the id the next sample starts at: zero (the start of the table) when a look
// from the start is due.
func (f *sampleFrontier) from(now time.Time) uuid.UUID {
	if f.lookedAt.IsZero() || now.Sub(f.lookedAt) >= f.pause {
		return uuid.UUID{}
	}
	if floor := outbox.IDFloor(f.lookedAt.Add(-outbox.CommitWindow)); bytes.Compare(floor[:], f.oldest[:]) < 0 {
		return floor
	}
	return f.oldest
}

// looked records a look from the start that began at start, took took and found oldest
// (nil: nothing pending). A failed look is paced like one that succeeded and leaves the
// frontier where it was (the start of the table, before any look succeeded).
func (f *sampleFrontier) looked(start time.Time, took time.Duration, oldest *uuid.UUID, err error) {
	f.lookedAt, f.pause = start, max(fullLookEvery, fullLookShare*took)
	switch {
	case err != nil:
	case oldest != nil:
		f.oldest = *oldest
	default:
		f.oldest = outbox.IDFloor(start.Add(-outbox.CommitWindow))
	}
}

// outboxSample reads one outbox: its pending rows by what keeps them (deferred by a
// refusing queue, under a live claim), the oldest pending row's commit and id, the latest
// publication, and the claimable rows that have waited at least $1 seconds, longest
// first, each with the moment it became claimable. The claimable rows are those the
// relays' claim (ClaimOutbox) would take: pending, available, not under a live claim,
// their aggregate's earlier events published. It reads the pending rows from the id $3
// on (a frontier: see sampleFrontier). Every part reads an index: the pending rows
// (outbox_ready), their aggregates' earlier events (the unique index), the latest
// publication (outbox_published_at).
const outboxSample = `
WITH pending AS (
    SELECT count(*) AS backlog,
           count(*) FILTER (WHERE available_at > now()) AS deferred,
           count(*) FILTER (WHERE available_at <= now() AND claimed_until >= now()) AS claimed,
           min(created_at) AS oldest
    FROM outbox WHERE state = 'pending' AND id >= $3
), claimable AS (
    SELECT o.id, o.event_type,
           greatest(o.created_at, o.available_at, o.claimed_until,
                    (SELECT max(e.published_at) FROM outbox e
                     WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id AND e.sequence < o.sequence)) AS since
    FROM outbox o
    WHERE o.state = 'pending' AND o.id >= $3
      AND o.available_at <= now()
      AND (o.claimed_until IS NULL OR o.claimed_until < now())
      AND NOT EXISTS (
          SELECT 1 FROM outbox e
          WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
            AND e.sequence < o.sequence AND e.state <> 'published')
), waiting AS (
    SELECT id, event_type, since, count(*) OVER () AS n
    FROM claimable ORDER BY since LIMIT $2
)
SELECT p.backlog, p.deferred, p.claimed, p.oldest,
       (SELECT id FROM outbox WHERE state = 'pending' AND id >= $3 ORDER BY id LIMIT 1) AS oldest_id,
       (SELECT max(published_at) FROM outbox WHERE state = 'published') AS last_published,
       coalesce((SELECT max(n) FROM waiting), 0) AS claimable,
       coalesce((SELECT json_agg(json_build_object('event_id', id, 'type', event_type, 'since', since) ORDER BY since)
                 FROM waiting WHERE since < now() - make_interval(secs => $1)), '[]') AS rows
FROM pending p`

// livenessSampler reads both outboxes and their relays' /readyz every livenessInterval,
// from the start of the load until it is stopped (once the system is quiet), for
// invariant 12 (check.Liveness).
type livenessSampler struct {
	mu      sync.Mutex
	samples []check.LivenessSample
	stop    context.CancelFunc
	done    chan struct{}
	cfg     config.Config
	fronts  map[string]*sampleFrontier // by service; each read by its service's sample only
}

// startLiveness starts sampling sys.
func startLiveness(ctx context.Context, sys *harness.System, cfg config.Config) *livenessSampler {
	ctx, stop := context.WithCancel(ctx)
	l := &livenessSampler{stop: stop, done: make(chan struct{}), cfg: cfg,
		fronts: map[string]*sampleFrontier{"ordering": {}, "inventory": {}}}
	go func() {
		defer close(l.done)
		t := time.NewTicker(livenessInterval)
		defer t.Stop()
		for {
			var wg sync.WaitGroup
			for _, svc := range []string{"ordering", "inventory"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := sampleService(ctx, sys, svc, l.fronts[svc], cfg.LivenessBound/2)
					l.mu.Lock()
					l.samples = append(l.samples, s)
					l.mu.Unlock()
				}()
			}
			wg.Wait()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return l
}

// finish stops the sampling and returns what it read.
func (l *livenessSampler) finish() *check.Liveness {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return &check.Liveness{Bound: l.cfg.LivenessBound, Grace: l.cfg.LivenessGrace, Interval: livenessInterval, Samples: l.samples}
}

// sampleService reads one service's outbox from its frontier and asks each of its
// relays' processes for /readyz, all at the same moment.
func sampleService(ctx context.Context, sys *harness.System, svc string, front *sampleFrontier, waited time.Duration) check.LivenessSample {
	s := check.LivenessSample{At: time.Now(), Service: svc}
	procs := sys.ProcessesOf(svc)
	s.Relays = len(procs)
	ready := make(chan bool, len(procs))
	for _, p := range procs {
		go func() { ready <- p.Ready(ctx, livenessInterval) }()
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := sampleOutbox(qctx, sys.DBs[svc], front, waited, &s); err != nil {
		s.Error = err.Error()
	}
	for range procs {
		if <-ready {
			s.Ready++
		}
	}
	return s
}

// sampleOutbox reads db's outbox into s (outboxSample) from front, which it moves on
// after a look from the start of the table.
func sampleOutbox(ctx context.Context, db *pgxpool.Pool, front *sampleFrontier, waited time.Duration, s *check.LivenessSample) error {
	start := time.Now()
	from := front.from(start)
	var oldest, lastPublished *time.Time
	var oldestID *uuid.UUID
	err := db.QueryRow(ctx, outboxSample, waited.Seconds(), livenessWaiting, from).
		Scan(&s.Backlog, &s.Deferred, &s.Claimed, &oldest, &oldestID, &lastPublished, &s.Claimable, &s.Waiting)
	if from == (uuid.UUID{}) {
		front.looked(start, time.Since(start), oldestID, err)
	}
	if oldest != nil {
		s.OldestPending = *oldest
	}
	if lastPublished != nil {
		s.LastPublished = *lastPublished
	}
	return err
}
