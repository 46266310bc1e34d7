package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// QueueFullMinRate is the least share of their rate just before it that the event types
// a queue_full does not refuse keep while it lasts: one queue refusing must not slow
// the rest of the system down.
const QueueFullMinRate = 0.8

// queueFullMinEvents is how many events of the other types the window before a
// queue_full must have for the rates to be compared at all.
const queueFullMinEvents = 20

// rateCheck is queue_full's comparison of the other types' published rates.
type rateCheck struct {
	checked bool
	ratio   float64
	detail  string
}

// otherTypes returns the event types whose rate queue_full compares for queue: those not
// bound to it (the broker refuses those) and not produced by its consumer's service
// (held down meanwhile, it produces nothing downstream of them). A queue whose consumer
// also serves the API (ordering) leaves none: the orders themselves stop.
func otherTypes(queue string) []string {
	consumer := strings.SplitN(queue, ".", 2)[0]
	if consumer == "ordering" {
		return nil
	}
	var refused, all []string
	for _, q := range contracts.Topology.Queues {
		for _, key := range q.Bindings {
			if q.Name == queue {
				refused = append(refused, key)
			}
			if !slices.Contains(all, key) {
				all = append(all, key)
			}
		}
	}
	var out []string
	for _, key := range all {
		if !slices.Contains(refused, key) && strings.SplitN(key, ".", 2)[0] != consumer {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// queueFullSettle is how long a queue_full waits, its other types' producers left alone,
// before its baseline window starts: a producer restarted or reconnected just before
// catches up on its backlog for a few seconds, faster than its rate.
const queueFullSettle = 3 * time.Second

// queueFullOutageTail is how long after an outage a queue_full's rates are not compared:
// the backlogs of an 8-12 s outage drained within 12 s of its end in the default run.
const queueFullOutageTail = 15 * time.Second

// everyPublisher is the guard's name for every publishing connection at once, which a
// broker alarm blocks: a queue_full comparing rates keeps alarms off.
const everyPublisher = "every-publisher"

// otherProducers names what a queue_full on queue keeps other faults off while it
// compares rates: the processes producing its otherTypes, their links (client's too) and
// every publisher (a broker alarm).
func otherProducers(sys *harness.System, queue string) []string {
	services := map[string]bool{}
	for _, t := range otherTypes(queue) {
		services[strings.SplitN(t, ".", 2)[0]] = true
	}
	out := []string{everyPublisher}
	for _, p := range sys.Procs {
		if services[p.Service] {
			out = append(out, p.Name, p.Name+"-postgres", p.Name+"-rabbitmq", "client-"+p.Name)
		}
	}
	return out
}

// counted is what a window saw of the other types' events: how many were written in it
// (by their ids' time) and how many were published in it (by published_at).
type counted struct{ written, published int }

// share is the part of what was written that was published: 1 for a relay keeping up.
func (c counted) share() float64 { return float64(c.published) / float64(c.written) }

// rateRatio is the share of the other types' events published during the cap against
// that share in the baseline before it, the baseline's taken as at most 1 (catching up on
// a backlog raises no bar above keeping up). Per event written, not per second: the load
// arrives as a Poisson process, and a window's count of events moves by itself by more
// than the check's margin (docs/chaos.md#queue_full). Not checked when the baseline had
// fewer than queueFullMinEvents written.
func rateRatio(before, during counted) rateCheck {
	if before.written < queueFullMinEvents || during.written == 0 {
		return rateCheck{detail: fmt.Sprintf("rate not compared: %d and %d events of the other types written in the windows", before.written, during.written)}
	}
	r := during.share() / min(1, before.share())
	return rateCheck{checked: true, ratio: r, detail: fmt.Sprintf("other types published at %.2f of their rate before, per event written (%d of %d during, %d of %d in a baseline as long, their producers left alone in both)", r, during.published, during.written, before.published, before.written)}
}

// queueFullRate compares the published rate of the event types queue_full's queue does
// not take (otherTypes) while the queue refused, from start to end, with their rate from
// baseline to start, each per event of theirs written in it (rateRatio). Only a window
// the load ran through is compared (loadRan): after the load nothing new is written.
func (in *Injector) queueFullRate(ctx context.Context, queue string, baseline, start, end time.Time, loadRan bool) rateCheck {
	types := otherTypes(queue)
	if len(types) == 0 {
		return rateCheck{detail: "rate not compared: no other type is produced while " + queue + "'s consumers are down"}
	}
	if !loadRan {
		return rateCheck{detail: "rate not compared: the load ended before the cap came off"}
	}
	// An outage stops every producer, and the backlog it leaves is caught up faster than
	// the rate for seconds after it: neither says anything about the cap.
	if o := in.outageBetween(baseline.Add(-queueFullOutageTail), end); o != nil {
		return rateCheck{detail: fmt.Sprintf("rate not compared: %s %d overlapped the windows or just preceded them", o.Kind, o.ID)}
	}
	before, err1 := countBetween(ctx, in.sys, types, baseline, start)
	during, err2 := countBetween(ctx, in.sys, types, start, end)
	if err := cmpOrErr(err1, err2); err != nil {
		return rateCheck{detail: "rate not compared: " + err.Error()}
	}
	return rateRatio(before, during)
}

// countBetween counts the events of types written in [from, to) (by their ids, which
// carry the time they were made: the primary key answers) and those published in it.
func countBetween(ctx context.Context, sys *harness.System, types []string, from, to time.Time) (counted, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var total counted
	for _, svc := range []string{"ordering", "inventory"} {
		var c counted
		if err := sys.DBs[svc].QueryRow(ctx, `SELECT
				(SELECT count(*) FROM outbox WHERE event_type = ANY($1) AND id >= $2 AND id < $3),
				(SELECT count(*) FROM outbox WHERE event_type = ANY($1) AND state = 'published' AND published_at >= $4 AND published_at < $5)`,
			types, outbox.IDFloor(from), outbox.IDFloor(to), from, to).Scan(&c.written, &c.published); err != nil {
			return counted{}, fmt.Errorf("%s outbox: %w", svc, err)
		}
		total.written += c.written
		total.published += c.published
	}
	return total, nil
}

// withRate adds queue_full's rate comparison to its check: a violation when the other
// types fell below QueueFullMinRate and nothing worse was found.
func withRate(c check.FaultCheck, r rateCheck) check.FaultCheck {
	c.Detail = strings.TrimPrefix(c.Detail+"; "+r.detail, "; ")
	if r.checked && r.ratio < QueueFullMinRate && c.Violation == "" {
		c.Violation = check.QueueFullStarved
	}
	return c
}
