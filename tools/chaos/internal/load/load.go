// Package load is the run's open-model client of ordering: operations start when the
// clock says, each retried under its own Idempotency-Key, and each ends ok, failed or
// unknown in the history the checker reads.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// OrderLoad is an open-model client of ordering: operations start when the clock says, not
// when the previous one finished, so a slow or crashed service faces the queue of
// customers it would face in production instead of a polite closed loop that waits.
// Each operation retries with its own Idempotency-Key as a real client would, and ends
// ok, failed or unknown.
type OrderLoad struct {
	baseURLs    []string // every ordering API; an attempt goes to the next one (shed.go's load balancer)
	client      *http.Client
	Ops         []check.ClientOp // planned: key, email, lines; filled in as they finish
	at          []time.Duration  // when each op starts, from the load's start
	maxInFlight int
	shedRetries int // how many 503s with Retry-After an operation takes before it gives up

	Sent, OK, Failed, Rejected, Unknown, InFlight, Delayed atomic.Int64
}

// Retry policy of one operation: a per-attempt timeout and a bounded number of attempts
// with capped exponential backoff, about a minute in all: longer than any single fault,
// and than most pile-ups of them.
const (
	AttemptTimeout = 3 * time.Second
	maxAttempts    = 15
	backoffBase    = 100 * time.Millisecond
	backoffMax     = 3 * time.Second
)

// Plan draws every operation from the seed: arrival times (exponential gaps, a
// Poisson process at cfg.Rate) and bodies (1-3 distinct books, 1-3 copies each).
func Plan(cfg config.Config, books []uuid.UUID, baseURLs []string) *OrderLoad {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c6f6164)) // "load"
	// Keep-alive for every customer at once: with Go's default of two idle connections per
	// host, a load of hundreds a second opens and closes a connection per request, through
	// the client's proxy too, and measures that instead of ordering.
	// At most maxIdle of them: each connection through the client's proxy is three file
	// descriptors of this process (the client's end, the proxy's two), and a run with
	// thousands of customers in flight met its limit of 20,000 ("too many open files").
	const maxIdle = 1000
	transport := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        min(cfg.MaxInFlight, maxIdle),
		MaxIdleConnsPerHost: min(cfg.MaxInFlight, maxIdle),
		IdleConnTimeout:     90 * time.Second,
	}
	l := &OrderLoad{
		baseURLs:    baseURLs,
		client:      &http.Client{Timeout: AttemptTimeout, Transport: transport},
		Ops:         make([]check.ClientOp, cfg.Orders),
		at:          make([]time.Duration, cfg.Orders),
		maxInFlight: cfg.MaxInFlight,
		shedRetries: cfg.ShedRetries,
	}
	var t float64
	for i := range cfg.Orders {
		t += rng.ExpFloat64() / cfg.Rate
		l.at[i] = time.Duration(t * float64(time.Second))
		n := 1 + rng.IntN(min(3, len(books)))
		perm := rng.Perm(len(books))[:n]
		lines := make([]check.OrderLine, n)
		for j, b := range perm {
			lines[j] = check.OrderLine{BookID: books[b], Quantity: 1 + rng.IntN(3)}
		}
		l.Ops[i] = check.ClientOp{
			N:     i,
			Key:   fmt.Sprintf("chaos-%d-%06d", cfg.Seed, i),
			Email: fmt.Sprintf("op-%06d@chaos.example", i),
			Lines: lines,
		}
		// Drawn for every op, so the bodies and times stay those of the same seed
		// whatever the share.
		cancel, later, after := rng.Float64(), rng.IntN(2) == 1, time.Duration(rng.Int64N(int64(2*time.Second)))
		if cancel < cfg.CancelShare {
			l.Ops[i].Cancel = true
			if later {
				l.Ops[i].CancelAfter = after
			}
		}
	}
	return l
}

// Run sends every operation at its time and returns when all have ended.
func (l *OrderLoad) Run(ctx context.Context) []check.ClientOp { return l.RunSending(ctx, ctx) }

// RunSending is Run that starts no operation once sending ends, and returns when the
// operations it started have ended (each within ctx). With a rate beyond what the system
// answers, the in-flight cap makes it a closed loop of that many customers.
func (l *OrderLoad) RunSending(ctx, sending context.Context) []check.ClientOp {
	start := time.Now()
	sem := make(chan struct{}, l.maxInFlight)
	var wg sync.WaitGroup
	for i := range l.Ops {
		if !harness.Sleep(sending, time.Until(start.Add(l.at[i]))) {
			break
		}
		select {
		case sem <- struct{}{}:
		default:
			// The cap is reached: this customer waits. Counted, because an open model
			// that quietly turns closed would hide exactly the overload it should show.
			l.Delayed.Add(1)
			select {
			case sem <- struct{}{}:
			case <-sending.Done():
			}
		}
		if sending.Err() != nil {
			break
		}
		l.Sent.Add(1)
		l.InFlight.Add(1)
		wg.Add(1)
		go func(op *check.ClientOp) {
			defer wg.Done()
			defer func() { <-sem }()
			l.place(ctx, op)
			if op.Cancel && op.Outcome == check.OutcomeOK {
				l.cancel(ctx, op)
			}
			l.InFlight.Add(-1)
			switch {
			case op.Outcome == check.OutcomeOK:
				l.OK.Add(1)
			case op.Outcome == check.OutcomeFailed && op.Shed > 0:
				l.Rejected.Add(1)
			case op.Outcome == check.OutcomeFailed:
				l.Failed.Add(1)
			default:
				l.Unknown.Add(1)
			}
		}(&l.Ops[i])
	}
	wg.Wait()
	return l.Ops[:l.Sent.Load()]
}

type orderBody struct {
	CustomerEmail string            `json:"customer_email"`
	Lines         []check.OrderLine `json:"lines"`
}

// place runs one operation to its end. An answer that proves the order was not placed
// (400, 422, a refused connection, and a 503 with Retry-After: ordering shed the request
// before it did anything) is a definite failure; a timeout, a reset, another 5xx, a 409
// (the same key still in flight) or a 503 naming a connection lost under the request
// (mayHaveDone) may hide a placed order, so once one of those is seen,
// running out of attempts makes the outcome unknown, never failed. A 503 with Retry-After
// is retried after the time it asks for, --shed-retries times; then the operation ends
// rejected (failed, with Shed > 0): the customer was told to come back later.
func (l *OrderLoad) place(ctx context.Context, op *check.ClientOp) {
	body, _ := json.Marshal(orderBody{CustomerEmail: op.Email, Lines: op.Lines})
	op.Start = time.Now()
	defer func() {
		op.End = time.Now()
		op.Latency = op.End.Sub(op.Start)
	}()
	ambiguous := false
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		op.Attempts = attempt
		r := l.postTo(ctx, l.baseURL(op.N+attempt-1), "/orders", op.Key, body)
		op.Tries = append(op.Tries, r.Try)
		var wait time.Duration
		switch {
		case r.err != nil:
			op.Error = r.err.Error()
			if !r.refused() {
				ambiguous = true
			}
		case r.Status == http.StatusCreated || r.Status == http.StatusOK:
			var o struct {
				ID uuid.UUID `json:"id"`
			}
			if err := json.Unmarshal(r.body, &o); err != nil || o.ID == uuid.Nil {
				op.Error = fmt.Sprintf("%d with an unreadable body: %.100s", r.Status, r.body)
				ambiguous = true
				break
			}
			op.Outcome, op.OrderID, op.Error = check.OutcomeOK, o.ID, ""
			return
		case r.Status == http.StatusBadRequest || r.Status == http.StatusUnprocessableEntity:
			op.Outcome, op.Error = check.OutcomeFailed, fmt.Sprintf("%d: %.200s", r.Status, r.body)
			if ambiguous {
				op.Outcome = check.OutcomeUnknown
			}
			return
		case r.shed():
			op.Shed++
			op.Error = fmt.Sprintf("%d Retry-After %s: %.200s", r.Status, r.afterHdr, r.body)
			ambiguous = ambiguous || r.mayHaveDone()
			if op.Shed > l.shedRetries {
				op.Outcome = check.OutcomeFailed
				if ambiguous {
					op.Outcome = check.OutcomeUnknown
				}
				return
			}
			wait = r.after()
		default: // 409, another 5xx, a 503 without Retry-After, anything else
			op.Error = fmt.Sprintf("%d: %.200s", r.Status, r.body)
			ambiguous = true
		}
		if ctx.Err() != nil {
			break
		}
		if wait == 0 {
			d := min(backoffBase<<(attempt-1), backoffMax)
			wait = d/2 + rand.N(d/2+1)
		}
		if !harness.Sleep(ctx, wait) {
			break
		}
	}
	op.Outcome = check.OutcomeFailed
	if ambiguous {
		op.Outcome = check.OutcomeUnknown
	}
}

// cancel cancels a placed order, right after its 201 or CancelAfter later (the first
// often overtakes the placement in inventory's queue), with its own Idempotency-Key and
// the retries of place. 200 is ok, 409 not-cancellable (rejected by then) a definite
// failure, and so are 503s with Retry-After alone (nothing was done); what never got an
// answer stays unknown.
func (l *OrderLoad) cancel(ctx context.Context, op *check.ClientOp) {
	if !harness.Sleep(ctx, op.CancelAfter) {
		return
	}
	op.CancelOutcome = check.OutcomeUnknown
	ambiguous, shed := false, 0
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		r := l.postTo(ctx, l.baseURL(op.N+attempt), "/orders/"+op.OrderID.String()+"/cancel", op.Key+"-cancel", []byte(`{}`))
		var wait time.Duration
		switch {
		case r.err != nil:
			op.CancelError = r.err.Error()
			if !r.refused() {
				ambiguous = true
			}
		case r.Status == http.StatusOK:
			op.CancelOutcome, op.CancelError = check.OutcomeOK, ""
			return
		case r.Status == http.StatusConflict && bytes.Contains(r.body, []byte("not-cancellable")):
			op.CancelOutcome, op.CancelError = check.OutcomeFailed, fmt.Sprintf("%d: %.200s", r.Status, r.body)
			return
		case r.shed():
			shed++
			op.CancelError = fmt.Sprintf("%d Retry-After %s: %.200s", r.Status, r.afterHdr, r.body)
			ambiguous = ambiguous || r.mayHaveDone()
			if shed > l.shedRetries {
				if !ambiguous {
					op.CancelOutcome = check.OutcomeFailed
				}
				return
			}
			wait = r.after()
		default:
			op.CancelError = fmt.Sprintf("%d: %.200s", r.Status, r.body)
			ambiguous = true
		}
		if ctx.Err() != nil {
			return
		}
		if wait == 0 {
			d := min(backoffBase<<(attempt-1), backoffMax)
			wait = d/2 + rand.N(d/2+1)
		}
		if !harness.Sleep(ctx, wait) {
			return
		}
	}
}

// baseURL is the ordering API the n-th attempt goes to: the load spreads operations over
// every API, and a retry goes to the next one, as behind a load balancer.
func (l *OrderLoad) baseURL(n int) string { return l.baseURLs[n%len(l.baseURLs)] }

// answer is one attempt's answer, or its error.
type answer struct {
	check.Try
	body     []byte
	afterHdr string       // the Retry-After header
	err      error        //
	wrote    *atomic.Bool // the request was written to a connection, on any of the transport's tries
}

// refused reports an attempt that certainly never reached a server: its connection was
// refused, and it had not been written to another one before.
func (a answer) refused() bool { return a.err != nil && refused(a.err) && !a.wrote.Load() }

// shed reports a 503 with Retry-After: ordering refused the request, to be sent again
// later (docs/problems.md#overloaded, #unavailable). Most are answered before anything
// was done; mayHaveDone tells the one that is not.
func (a answer) shed() bool { return a.Status == http.StatusServiceUnavailable && a.afterHdr != "" }

// mayHaveDone reports a 503 whose detail says ordering's database connection broke under
// the request (database-connection-lost): if that was during its commit, the order was
// placed (or cancelled), and a retry with the same key answers with it.
func (a answer) mayHaveDone() bool {
	return a.shed() && bytes.Contains(a.body, []byte("database-connection-lost"))
}

// after is how long Retry-After asks to wait, with up to half of it again as jitter, so
// the customers shed together do not all come back in the same instant.
func (a answer) after() time.Duration {
	secs, err := strconv.Atoi(a.afterHdr)
	if err != nil || secs < 0 {
		secs = 1
	}
	d := time.Duration(max(secs, 0)) * time.Second
	return d + rand.N(d/2+1)
}

func (l *OrderLoad) postTo(ctx context.Context, base, path, key string, body []byte) (a answer) {
	a.At = time.Now()
	a.wrote = new(atomic.Bool)
	defer func() {
		a.Took = time.Since(a.At)
		a.RetryAfter = a.afterHdr != ""
		if a.err != nil {
			a.Timeout = isTimeout(a.err)
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		a.err = err
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	// Go's transport takes a request with an Idempotency-Key for idempotent and, when a
	// kept-alive connection breaks under it, sends it again on a new one by itself; the
	// error that comes back is then the last connection's. A dial refused there says
	// nothing about the first, which may have placed the order (the first chaos-load run
	// told a client "failed" for an order that existed that way), so refused counts only
	// for an attempt that never wrote its request anywhere.
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { a.wrote.Store(true) },
	}))
	resp, err := l.client.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.Status, a.afterHdr = resp.StatusCode, resp.Header.Get("Retry-After")
	a.body, a.err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return a
}

// isTimeout reports an attempt that ran out of its time without an answer.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// refused reports an error that proves the request never reached a server.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}
