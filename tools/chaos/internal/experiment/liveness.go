package experiment

import (
	"context"
	"sync"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// livenessInterval is how often the sampler reads each outbox and its relays' /readyz.
const livenessInterval = 300 * time.Millisecond

// livenessWaiting is how many of the longest-waiting claimable rows a sample keeps.
const livenessWaiting = 5

// outboxSample reads one outbox: its pending rows by what keeps them (deferred by a
// refusing queue, under a live claim), the oldest pending row's commit, the latest
// publication, and the claimable rows that have waited at least $1 seconds, longest
// first, each with the moment it became claimable. The claimable rows are those the
// relays' claim (ClaimOutbox) would take: pending, available, not under a live claim,
// their aggregate's earlier events published. Every part reads an index: the pending
// rows (outbox_ready), their aggregates' earlier events (the unique index), the latest
// publication (outbox_published_at).
const outboxSample = `
WITH pending AS (
    SELECT count(*) AS backlog,
           count(*) FILTER (WHERE available_at > now()) AS deferred,
           count(*) FILTER (WHERE available_at <= now() AND claimed_until >= now()) AS claimed,
           min(created_at) AS oldest
    FROM outbox WHERE state = 'pending'
), claimable AS (
    SELECT o.id, o.event_type,
           greatest(o.created_at, o.available_at, o.claimed_until,
                    (SELECT max(e.published_at) FROM outbox e
                     WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id AND e.sequence < o.sequence)) AS since
    FROM outbox o
    WHERE o.state = 'pending'
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
}

// startLiveness starts sampling sys.
func startLiveness(ctx context.Context, sys *harness.System, cfg config.Config) *livenessSampler {
	ctx, stop := context.WithCancel(ctx)
	l := &livenessSampler{stop: stop, done: make(chan struct{}), cfg: cfg}
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
					s := sampleService(ctx, sys, svc, cfg.LivenessBound/2)
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

// sampleService reads one service's outbox and asks each of its relays' processes for
// /readyz, all at the same moment.
func sampleService(ctx context.Context, sys *harness.System, svc string, waited time.Duration) check.LivenessSample {
	s := check.LivenessSample{At: time.Now(), Service: svc}
	procs := sys.ProcessesOf(svc)
	s.Relays = len(procs)
	ready := make(chan bool, len(procs))
	for _, p := range procs {
		go func() { ready <- p.Ready(ctx, livenessInterval) }()
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var oldest, lastPublished *time.Time
	var rows []check.WaitingRow
	err := sys.DBs[svc].QueryRow(qctx, outboxSample, waited.Seconds(), livenessWaiting).
		Scan(&s.Backlog, &s.Deferred, &s.Claimed, &oldest, &lastPublished, &s.Claimable, &rows)
	if err != nil {
		s.Error = err.Error()
	}
	if oldest != nil {
		s.OldestPending = *oldest
	}
	if lastPublished != nil {
		s.LastPublished = *lastPublished
	}
	s.Waiting = rows
	for range procs {
		if <-ready {
			s.Ready++
		}
	}
	return s
}
