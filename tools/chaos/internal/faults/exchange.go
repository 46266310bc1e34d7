package faults

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// ExchangeRecoveryLimit is exchange_deleted's bound: from the delete until the relays
// have declared the exchange again and published every row written before it was back.
// A relay notices at its next batch (a poll of at most 1 s, or at once on a NOTIFY),
// drops its channel on the broker's NOT_FOUND, and declares the exchange on the next
// one after its backoff; a dial, a confirm timeout (2 s) and a retry fit many times.
const ExchangeRecoveryLimit = 20 * time.Second

// exchangeWatchLimit is how long exchange_deleted keeps watching after its bound, so
// that a slow recovery is measured, not only reported late.
const exchangeWatchLimit = 2 * time.Minute

// exchangeDeleted deletes the events exchange of the run's vhost under traffic, and with
// it every binding of the work queues. No process is told: the relays must find out on
// their own (the broker closes the channel of a publish to it with NOT_FOUND), declare
// it again and bind each queue to its copies' key before publishing there; until then a
// copy published with mandatory comes back, which the relay takes as its queue missing,
// not as a publish. The check: the exchange is back and every row written before then is
// published within ExchangeRecoveryLimit of the delete, and every event type published
// since the delete is bound to each of its queues by then.
func (in *Injector) exchangeDeleted(ctx context.Context, f *check.Fault) {
	var held bounded
	defer held.done()
	in.lockTopo(true) // no poison, duplicate or queue fault while the exchange is missing
	held.hold(in.unlockTopo)
	if ctx.Err() != nil {
		// It waited for other topology faults until the load was over: with nothing left
		// to publish no relay would look for the exchange.
		in.record(f, false, "skipped: the load ended while other topology faults held the broker")
		return
	}
	// No new fault may kill, freeze, cut off or block a relay meanwhile: the recovery
	// measured must be this fault's. Those in progress are part of the state it meets.
	targets := exchangeTargets(in.sys.Cfg.RelayProcesses())
	in.guard.fence(targets...)
	held.hold(func() { in.guard.unfence(targets...) })
	ctx = context.WithoutCancel(ctx)
	m := in.sys.Management()
	path := "/api/exchanges/" + url.PathEscape(in.sys.Vhost) + "/" + url.PathEscape(contracts.Exchange)
	if err := m.Do(ctx, http.MethodDelete, path, "", nil); err != nil {
		in.fail(f, false, "delete: "+err.Error())
		return
	}
	deleted := time.Now()
	held.from(deleted, ExchangeRecoveryLimit)
	in.begin(f)
	var relays []*harness.Process
	for _, name := range in.sys.Cfg.RelayProcesses() {
		if p := in.sys.Process(name); p != nil {
			relays = append(relays, p)
		}
	}
	named := map[string]bool{} // relays whose /readyz named the missing exchange
	var back, drained, lastAsked time.Time
	idle := false // nothing written since the delete: no relay had a reason to look
	for time.Since(deleted) < exchangeWatchLimit {
		held.check()
		if back.IsZero() && m.Do(ctx, http.MethodGet, path, "", nil) == nil {
			back = time.Now()
		}
		if back.IsZero() && time.Since(deleted) > ExchangeRecoveryLimit {
			if n, err := writtenSince(ctx, in.sys, deleted); err == nil && n == 0 {
				idle = true
				break
			}
		}
		if !back.IsZero() {
			if pending, err := pendingBefore(ctx, in.sys, back); err == nil && pending == 0 {
				drained = time.Now()
				break
			}
		}
		// /readyz every half second: each failing answer is a line in the process's log.
		if time.Since(lastAsked) >= 500*time.Millisecond {
			lastAsked = time.Now()
			for _, p := range relays {
				if status, body := harness.Readyz(ctx, p); status != http.StatusOK && strings.Contains(body, contracts.Exchange) {
					named[p.Name] = true
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	readyNote := fmt.Sprintf("/readyz named %s on %s", contracts.Exchange, cmp.Or(strings.Join(slices.Sorted(maps.Keys(named)), ", "), "no relay"))
	if idle {
		// Declared again by the harness, so that the run goes on as it was; the relays
		// bind each queue to its copies' key when they next publish.
		err := m.Do(ctx, http.MethodPut, path, `{"type":"topic","durable":true}`, nil)
		in.record(f, true, fmt.Sprintf("deleted %s; nothing written since in %v, declared again by the harness (%v); %s", contracts.Exchange, ExchangeRecoveryLimit, err, readyNote))
		in.setCheck(f, check.FaultCheck{Detail: "not checked: no event was written after the delete"})
		return
	}
	if back.IsZero() {
		in.record(f, true, fmt.Sprintf("deleted %s; not declared again within %v; %s", contracts.Exchange, exchangeWatchLimit, readyNote))
		in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.ExchangeSlow,
			Detail: fmt.Sprintf("%s not declared again %v after it was deleted", contracts.Exchange, exchangeWatchLimit)})
		return
	}
	in.record(f, true, fmt.Sprintf("deleted %s; declared again %.1fs later; %s", contracts.Exchange, back.Sub(deleted).Seconds(), readyNote))
	in.mu.Lock()
	f.End = back // the exchange was missing until a relay declared it again
	in.mu.Unlock()
	c := check.FaultCheck{Checked: true, Drain: time.Since(deleted)}
	switch {
	case drained.IsZero():
		c.Violation, c.Detail = check.ExchangeSlow, fmt.Sprintf("rows written before %s was declared again at %s still unpublished %v after the delete", contracts.Exchange, back.Format("15:04:05.000"), exchangeWatchLimit)
	case drained.Sub(deleted) > ExchangeRecoveryLimit:
		c.Drain = drained.Sub(deleted)
		c.Violation, c.Detail = check.ExchangeSlow, fmt.Sprintf("declared again after %.1fs, rows written before then published after %.1fs, over the bound of %v", back.Sub(deleted).Seconds(), c.Drain.Seconds(), ExchangeRecoveryLimit)
	default:
		c.Drain = drained.Sub(deleted)
		if unbound := in.unboundSince(ctx, deleted.Add(time.Second)); unbound != "" {
			c.Violation, c.Detail = check.ExchangeSlow, "published since the delete and not bound by now: "+unbound
		} else {
			c.Detail = fmt.Sprintf("declared again after %.1fs, drained after %.1fs, every type published since bound", back.Sub(deleted).Seconds(), c.Drain.Seconds())
		}
	}
	in.setCheck(f, in.unlessOutage(c, deleted, cmp.Or(drained, time.Now())))
}

// exchangeTargets names what exchange_deleted keeps new faults off while it measures:
// every relay process, its Postgres and RabbitMQ links, and every publisher (a broker
// alarm). A timeout toxic on a relay's Postgres link, say, holds the rows that relay has
// claimed until its lease ends, and the check would count that wait as the exchange's.
func exchangeTargets(relays []string) []string {
	out := []string{everyPublisher}
	for _, p := range relays {
		out = append(out, p, p+"-postgres", p+"-rabbitmq")
	}
	return out
}

// unboundSince lists the copy keys (broker.QueueKey) of the contracts' bindings whose
// event type was published since t and that the broker does not have: a publisher binds
// each queue to its copy's key before it publishes there on a fresh channel, so each of
// those must be bound by now.
func (in *Injector) unboundSince(ctx context.Context, t time.Time) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var missing []string
	for _, q := range contracts.Topology.Queues {
		bound, err := in.sys.QueueBindings(ctx, q.Name, contracts.Topology.Exchange)
		if err != nil {
			return ""
		}
		for _, key := range q.Bindings {
			producer := strings.SplitN(key, ".", 2)[0]
			var n int
			if err := in.sys.DBs[producer].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'published' AND event_type = $1 AND published_at >= $2`, key, t).Scan(&n); err != nil || n == 0 {
				continue
			}
			if !slices.Contains(bound, broker.QueueKey(key, q.Name)) {
				missing = append(missing, fmt.Sprintf("%s to %s (%d published)", broker.QueueKey(key, q.Name), q.Name, n))
			}
		}
	}
	return strings.Join(missing, ", ")
}

// writtenSince counts the rows written to both outboxes since t.
func writtenSince(ctx context.Context, sys *harness.System, t time.Time) (int, error) {
	total := 0
	for _, svc := range []string{"ordering", "inventory"} {
		var n int
		if err := sys.DBs[svc].QueryRow(ctx, `SELECT count(*) FROM outbox WHERE created_at > $1`, t).Scan(&n); err != nil {
			return 0, fmt.Errorf("%s outbox: %w", svc, err)
		}
		total += n
	}
	return total, nil
}
