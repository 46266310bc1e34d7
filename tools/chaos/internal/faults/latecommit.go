package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
)

// LateCommitHold is at least how long late_commit holds a transaction before its commit:
// longer than the relays' commit window (10 s, outbox's commitWindow), the time after
// its id was made within which a row's commit is still covered by the claim's range.
const LateCommitHold = 12 * time.Second

// lateCommitArming is at least how long before the load's end late_commit starts: its
// process restarts, and must then be handed an order to hold.
const lateCommitArming = 10 * time.Second

// lateCommitFireLimit bounds how long late_commit waits for its failpoint to hold a
// transaction once armed.
const lateCommitFireLimit = 30 * time.Second

// heldTransaction is a session of a service's role idle for a second or more in a
// transaction begun since the process restarted armed: the one the failpoint holds (a
// handler's transaction waits on nothing else; a session another fault left open, such
// as half_open's, began before).
const heldTransaction = `
SELECT pid, xact_start FROM pg_stat_activity
WHERE datname = current_database() AND usename = $1 AND xact_start > $2
  AND state = 'idle in transaction' AND state_change < now() - interval '1 second'
ORDER BY xact_start LIMIT 1`

// lateCommit restarts the inventory process f.Target with a once* delay of f.Duration
// (LateCommitHold or more) before its transaction's commit: one handler's transaction,
// its outbox row's id made, commits that long after, when the relays' frontier has moved
// past the id and their commit window with it. Only their sweep from the start of the
// table finds such a row. The check: every outbox row of the held transaction is
// published within the liveness bound of its commit, as any row must be, unless another
// fault that can hold up inventory's relay struck meanwhile (unlessStruck).
func (in *Injector) lateCommit(ctx context.Context, f *check.Fault) {
	load := ctx
	ctx = context.WithoutCancel(ctx) // once begun, it runs to its end: the process is disarmed
	p := in.sys.Process(f.Target)
	if p == nil {
		in.fail(f, false, "no process "+f.Target)
		return
	}
	// Other faults are kept off the process only while this one needs it: the failpoint
	// faults (which restart it) until the held transaction commits, a relay twin's check
	// until the failpoint has fired (it may run beside the held transaction).
	unlock := in.takeForHold(p.Name)
	defer unlock()
	if load.Err() != nil {
		in.record(f, false, "skipped: the load ended while a failpoint held the process")
		return
	}
	in.guard.enter(p.Name)
	leave := sync.OnceFunc(func() { in.guard.leave(p.Name) })
	defer leave()
	db := in.sys.DBs["inventory"]
	role := in.sys.Cfg.DatabaseName("inventory")

	// Armed from its restart: whether other faults let it be ready soon or late, it holds
	// the first transaction it gets to.
	armed := time.Now()
	p.Restart(f.Detail, 5*time.Second)
	in.begin(f)

	// The held transaction: the first of the role's sessions idle in one.
	var pid int
	var began time.Time
	for time.Since(armed) < lateCommitFireLimit && pid == 0 {
		if err := db.QueryRow(ctx, heldTransaction, role, armed).Scan(&pid, &began); err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if pid == 0 {
		p.Restart("", 5*time.Second) // not fired (no order reached it): disarmed
		in.record(f, false, fmt.Sprintf("no transaction held within %v of arming %s; disarmed", lateCommitFireLimit, f.Detail))
		return
	}
	p.Disarm() // fired: a later restart must not arm it again
	leave()

	// Its commit: the session leaves that transaction.
	var committed time.Time
	for deadline := began.Add(f.Duration + 10*time.Second); committed.IsZero() && time.Now().Before(deadline); {
		var still bool
		if err := db.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND xact_start = $2`, pid, began).Scan(&still); err == nil && !still {
			committed = time.Now()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if committed.IsZero() {
		in.record(f, true, fmt.Sprintf("a transaction held from %s did not end within %v of its hold", began.Format("15:04:05.000"), f.Duration+10*time.Second))
		return
	}
	unlock()
	in.mu.Lock()
	f.End = committed
	in.mu.Unlock()

	// Its outbox rows (created_at is its transaction's start), each published within the
	// bound of the commit. None: the transaction rolled back (its handler failed, or the
	// process was killed), and nothing was late.
	bound := in.sys.Cfg.LivenessBound
	for {
		var rows, pending int
		var last *time.Time
		err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state <> 'published'), max(published_at) FROM outbox WHERE created_at = $1`, began).
			Scan(&rows, &pending, &last)
		switch {
		case err != nil:
		case rows == 0:
			in.record(f, true, fmt.Sprintf("transaction held %.1fs (%s) rolled back: no row committed late", committed.Sub(began).Seconds(), f.Detail))
			in.setCheck(f, check.FaultCheck{Checked: false})
			return
		case pending == 0:
			took := max(last.Sub(committed), 0)
			in.record(f, true, fmt.Sprintf("transaction held %.1fs (%s); its %d outbox rows published %.2fs after its commit", committed.Sub(began).Seconds(), f.Detail, rows, took.Seconds()))
			c := check.FaultCheck{Checked: true, Drain: took}
			if took > bound {
				c.Violation = check.LateCommitWaited
				c.Detail = fmt.Sprintf("outbox rows of a transaction committed %.1fs after its ids were made published %.2fs after the commit (bound %v)", committed.Sub(began).Seconds(), took.Seconds(), bound)
			}
			in.setCheck(f, in.unlessStruck(c, "inventory", committed.Add(-bound), committed.Add(took)))
			return
		}
		if time.Since(committed) > AlarmDrainLimit {
			in.setCheck(f, in.unlessStruck(check.FaultCheck{Checked: true, Violation: check.LateCommitWaited,
				Detail: fmt.Sprintf("%d of %d outbox rows of a transaction committed at %s still pending %v later", pending, rows, committed.Format("15:04:05.000"), AlarmDrainLimit)},
				"inventory", committed.Add(-bound), time.Now()))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unlessStruck leaves c unchecked when a fault other than the late commit's own that can
// hold up service's relay (an outage, a kill or link fault of its processes, a heavy
// fault: check.Strikes) was in force from from to to: the wait measured is then that
// fault's as much as the relay's.
func (in *Injector) unlessStruck(c check.FaultCheck, service string, from, to time.Time) check.FaultCheck {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := range in.Faults {
		o := &in.Faults[i]
		if o.Kind == check.FaultLateCommit || o.Start.IsZero() || o.Start.After(to) || (!o.End.IsZero() && o.End.Before(from)) || !check.Strikes(*o, service) {
			continue
		}
		return check.FaultCheck{Drain: c.Drain, Detail: fmt.Sprintf("not checked: %s %d on %s struck %s's relay meanwhile; %s", o.Kind, o.ID, o.Target, service, c.Detail)}
	}
	return c
}

// takeForHold takes process name's failpoint turn for a fault that holds a transaction
// in it, and returns what gives the turn back. A failpoint that holds the turn and has
// not fired gives it up at the end of its first window instead of its third: the run
// has other failpoints of its name, and one late commit, which needs the load's orders.
func (in *Injector) takeForHold(name string) (release func()) {
	select {
	case in.wanted[name] <- struct{}{}:
	default: // another fault asked already
	}
	mu := in.fpMu[name]
	mu.Lock()
	select {
	case <-in.wanted[name]: // the turn was free: no failpoint took the request
	default:
	}
	return sync.OnceFunc(mu.Unlock)
}
