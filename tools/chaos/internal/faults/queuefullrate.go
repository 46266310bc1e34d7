package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
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

// rateRatio is the rate during a window set against the rate during the baseline window
// before it, from the two counts; not checked when the baseline had fewer than
// queueFullMinEvents.
func rateRatio(before, during int) rateCheck {
	if before < queueFullMinEvents {
		return rateCheck{detail: fmt.Sprintf("rate not compared: %d events of the other types in the window before", before)}
	}
	r := float64(during) / float64(before)
	return rateCheck{checked: true, ratio: r, detail: fmt.Sprintf("other types published at %.2f of their rate before (%d during, %d in a baseline as long, their producers left alone in both)", r, during, before)}
}

// queueFullRate compares the published rate of the event types queue_full's queue does
// not take (otherTypes) while the queue refused, from start to end, with their rate from
// baseline to start, the same length or longer. Only a window the load ran through is
// compared (loadRan): after the load nothing new is written, and the rate falls for that
// alone.
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
	before, err1 := publishedBetween(ctx, in.sys, types, baseline, start)
	during, err2 := publishedBetween(ctx, in.sys, types, start, end)
	if err := cmpOrErr(err1, err2); err != nil {
		return rateCheck{detail: "rate not compared: " + err.Error()}
	}
	// Per second of each: the policy's PUT makes the baseline a little shorter than the cap.
	return rateRatio(int(float64(before)*float64(end.Sub(start))/float64(start.Sub(baseline))), during)
}

// publishedBetween counts the events of types published (by their outbox's
// published_at) in [from, to).
func publishedBetween(ctx context.Context, sys *harness.System, types []string, from, to time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	total := 0
	for _, svc := range []string{"ordering", "inventory"} {
		var n int
		if err := sys.DBs[svc].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE event_type = ANY($1) AND published_at >= $2 AND published_at < $3`, types, from, to).Scan(&n); err != nil {
			return 0, fmt.Errorf("%s outbox: %w", svc, err)
		}
		total += n
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
