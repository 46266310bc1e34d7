package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// ConsumerTimeout is the consumer timeout consumer_timeout puts on its queue for the
// fault (a policy, consumer-timeout): short, so that a handler held a few seconds
// outlasts it. The broker's default is 30 minutes.
const ConsumerTimeout = 2 * time.Second

// consumerTimeoutQueue is the queue consumer_timeout times out: inventory's, whose
// handler holds its inbox row uncommitted while it is held.
const consumerTimeoutQueue = contracts.QueueInventoryOrderPlaced

// consumerTimeoutLimits bound consumer_timeout's waits: for the held failpoint to fire
// and the broker to take the delivery back, and for the held consumer to consume again
// after that (the hold, then the handler timeout at most, then a reconnect).
const (
	consumerTimeoutFireLimit   = 30 * time.Second
	consumerTimeoutResumeLimit = time.Minute
)

// consumerTimeoutFailpoint is the failpoint consumer_timeout (and late_commit, for longer)
// arms on its target: the first inventory transaction it runs waits hold before its
// commit, its inbox row written.
func consumerTimeoutFailpoint(hold time.Duration) string {
	return failpoint.Set{contracts.InventoryBeforeCommit: {Kind: failpoint.Delay, Delay: hold, Probability: 1, Once: true}}.String()
}

// consumerTimeout holds one handler of the inventory process f.Target past a short
// consumer timeout: a policy puts ConsumerTimeout on inventory's queue, and the process
// is restarted with a once* delay of f.Duration before its transaction's commit. The
// broker takes the delivery back from under the handler (RabbitMQ 4.3 cancels the
// consumer, 3.12 to 4.2 close its channel) and delivers it again, at once, to the other
// inventory process, whose inbox claim waits on the held transaction's row and then
// finds a duplicate. The held consumer consumes again only once its handler has returned
// (it waits for the handlers at work before it leaves the session). The fault ends when
// it does; its check measures how long every event published to the queue before then
// takes to be processed, the held one included.
//
// RabbitMQ 3.10 and 3.11 have no per-queue timeout: only the node-wide consumer_timeout,
// checked on each channel's tick (once a minute by default). The run does not change
// the broker's settings, so on them the fault is skipped and says why; the consumer's
// own tests boot a node with both set (services/platform/consumer).
func (in *Injector) consumerTimeout(ctx context.Context, f *check.Fault) {
	ctx = context.WithoutCancel(ctx) // once begun, it runs to its end: the policy always comes off
	p := in.sys.Process(f.Target)
	if p == nil {
		in.fail(f, false, "no process "+f.Target)
		return
	}
	m := in.sys.Management()
	version, err := brokerVersion(ctx, m)
	if err != nil {
		in.fail(f, false, "the broker's version: "+err.Error())
		return
	}
	if !version.atLeast(3, 12) {
		in.record(f, false, fmt.Sprintf("skipped: RabbitMQ %s has only the node-wide consumer_timeout, checked on each channel's tick (60 s by default), which the run does not change; 3.12 and later take a consumer-timeout policy per queue", version))
		return
	}
	in.lockTopo(false) // one queue policy at a time (queue_full's is another), and no queue missing
	defer in.unlockTopo()
	in.guard.enter(p.Name)
	defer in.guard.leave(p.Name)

	const policy = "chaos-consumer-timeout"
	body, err := consumerTimeoutBody(in.sys.Cfg.DeliveryLimit)
	if err == nil {
		err = in.putPolicy(ctx, policy, body)
	}
	if err != nil {
		in.fail(f, false, "policy: "+err.Error())
		return
	}
	// The policy times out every consumer of the queue, and on RabbitMQ 4.3 a delivery
	// waiting in a consumer's prefetch buffer counts too: it comes off as soon as the
	// held consumer consumes again, and whatever happens.
	removed := false
	unset := func() {
		for range 30 {
			if removed = in.putPolicy(ctx, policy, "") == nil; removed {
				return
			}
			time.Sleep(time.Second)
		}
	}
	defer func() {
		if !removed {
			unset()
		}
	}()

	off := p.LogSize()
	p.Restart(f.Detail, 5*time.Second)
	if err := p.WaitReady(ctx, 30*time.Second); err != nil {
		p.Restart("", 5*time.Second)
		in.record(f, false, "armed, not ready: "+err.Error())
		return
	}
	in.begin(f)
	armed := time.Now()

	// The broker takes the delivery back: the held consumer says so in its log at once,
	// and that it consumes again once its handlers have returned.
	var taken, resumed time.Time
	var reason string
	for deadline := armed.Add(f.Duration + consumerTimeoutFireLimit); taken.IsZero() || resumed.IsZero(); {
		var lines []string
		lines, off = p.LogSince(off)
		for _, l := range lines {
			switch msg, errText := consumerLogLine(l); {
			case taken.IsZero() && msg == consumerStopped && timedOut.MatchString(errText):
				taken, reason = time.Now(), errText
			case !taken.IsZero() && msg == consumerConsuming:
				resumed = time.Now()
			}
		}
		if !taken.IsZero() {
			deadline = taken.Add(consumerTimeoutResumeLimit)
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if taken.IsZero() {
		// Not fired (the process had no order to handle, or was cut off): disarmed by a
		// restart, so that it cannot fire outside the fault.
		p.Restart("", 5*time.Second)
		in.record(f, false, fmt.Sprintf("no delivery taken back within %v of arming %s; disarmed", f.Duration+consumerTimeoutFireLimit, f.Detail))
		return
	}
	p.Disarm() // fired: it does nothing more, and a later restart must not arm it again
	unset()
	if resumed.IsZero() {
		in.record(f, true, fmt.Sprintf("the broker took a delivery back %.1fs after arming (%s); the consumer did not consume again within %v", taken.Sub(armed).Seconds(), reason, consumerTimeoutResumeLimit))
		in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.TimeoutStalled,
			Detail: fmt.Sprintf("%s's consumer of %s not consuming %v after the broker took its delivery back", p.Name, consumerTimeoutQueue, consumerTimeoutResumeLimit)})
		return
	}
	in.record(f, true, fmt.Sprintf("handler held %.1fs (%s); the broker took the delivery back %.1fs after arming (%s); %s consumed again %.1fs later",
		f.Duration.Seconds(), f.Detail, taken.Sub(armed).Seconds(), reason, p.Name, resumed.Sub(taken).Seconds()))
	in.mu.Lock()
	f.End = resumed // record stamps now; the fault ended when the held consumer consumed again
	in.mu.Unlock()

	// Every event published to the queue before then must be processed, the held one too.
	for {
		left, err := unprocessedBefore(ctx, in.sys, armed.Add(-f.Duration), resumed)
		if err == nil && left == 0 {
			in.setCheck(f, check.FaultCheck{Checked: true, Drain: time.Since(resumed)})
			return
		}
		if time.Since(resumed) > AlarmDrainLimit {
			in.setCheck(f, check.FaultCheck{Checked: true, Violation: check.TimeoutStalled,
				Detail: fmt.Sprintf("%d events published to %s before %s consumed again at %s still unprocessed %v later (last error: %v)",
					left, consumerTimeoutQueue, p.Name, resumed.Format("15:04:05.000"), AlarmDrainLimit, err)})
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The consumer's log messages consumer_timeout follows (services/platform/consumer).
const (
	consumerStopped   = "consumer session ending; the handlers at work finish first"
	consumerConsuming = "consuming"
)

// timedOut matches why a consumer stopped when the broker timed a delivery out: 4.3's
// cancel, as the consumer words it, or 3.x's channel exception.
var timedOut = regexp.MustCompile(`consumer timeout|delivery acknowledgement on channel \d+ timed out`)

// consumerLogLine returns the message and error of a log line of consumerTimeoutQueue's
// consumer, or empty strings for any other line.
func consumerLogLine(line string) (msg, errText string) {
	var l struct {
		Msg       string `json:"msg"`
		Component string `json:"component"`
		Queue     string `json:"queue"`
		Err       string `json:"err"`
	}
	if json.Unmarshal([]byte(line), &l) != nil || l.Component != "consumer" || l.Queue != consumerTimeoutQueue {
		return "", ""
	}
	return l.Msg, l.Err
}

// unprocessedBefore counts the events bound to consumerTimeoutQueue that ordering
// published between from and to and inventory's inbox has no row of yet.
func unprocessedBefore(ctx context.Context, sys *harness.System, from, to time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var types []string
	for _, q := range contracts.Topology.Queues {
		if q.Name == consumerTimeoutQueue {
			types = q.Bindings
		}
	}
	rows, err := sys.DBs["ordering"].Query(ctx, `SELECT id::text FROM outbox WHERE state = 'published' AND event_type = ANY($1) AND published_at BETWEEN $2 AND $3`, types, from, to)
	if err != nil {
		return 0, fmt.Errorf("ordering outbox: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var done int
	err = sys.DBs["inventory"].QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer = 'inventory' AND message_id = ANY($1::uuid[])`, ids).Scan(&done)
	if err != nil {
		return 0, fmt.Errorf("inventory inbox: %w", err)
	}
	return len(ids) - done, nil
}

// consumerTimeoutBody is the policy consumer_timeout puts on its queue, with the run's
// delivery limit carried over as queueFullBody carries it.
func consumerTimeoutBody(deliveryLimit int) (string, error) {
	def := map[string]any{"consumer-timeout": ConsumerTimeout.Milliseconds()}
	if deliveryLimit > 0 {
		def["delivery-limit"] = deliveryLimit
	}
	b, err := json.Marshal(map[string]any{
		"pattern": "^" + regexp.QuoteMeta(consumerTimeoutQueue) + "$", "apply-to": "queues", "priority": 10, "definition": def,
	})
	return string(b), err
}

// rabbitVersion is a RabbitMQ release's major and minor number, and its whole version.
type rabbitVersion struct {
	major, minor int
	s            string
}

func (v rabbitVersion) String() string { return v.s }

func (v rabbitVersion) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

// brokerVersion asks the management API which RabbitMQ the run talks to.
func brokerVersion(ctx context.Context, m broker.Management) (rabbitVersion, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var overview struct {
		Version string `json:"rabbitmq_version"`
	}
	if err := m.Do(ctx, http.MethodGet, "/api/overview", "", &overview); err != nil {
		return rabbitVersion{}, err
	}
	v := rabbitVersion{s: overview.Version}
	if _, err := fmt.Sscanf(strings.TrimSpace(overview.Version), "%d.%d", &v.major, &v.minor); err != nil {
		return v, fmt.Errorf("version %q: %w", overview.Version, err)
	}
	return v, nil
}
