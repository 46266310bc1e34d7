package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// orderLoad is an open-model client of ordering: operations start when the clock says, not
// when the previous one finished, so a slow or crashed service faces the queue of
// customers it would face in production instead of a polite closed loop that waits.
// Each operation retries with its own Idempotency-Key as a real client would, and ends
// ok, failed or unknown.
type orderLoad struct {
	baseURL     string
	client      *http.Client
	ops         []clientOp      // planned: key, email, lines; filled in as they finish
	at          []time.Duration // when each op starts, from the load's start
	maxInFlight int

	sent, ok, failed, unknown, inFlight, delayed atomic.Int64
}

// Retry policy of one operation: a per-attempt timeout and a bounded number of attempts
// with capped exponential backoff, about a minute in all: longer than any single fault,
// and than most pile-ups of them.
const (
	attemptTimeout = 3 * time.Second
	maxAttempts    = 15
	backoffBase    = 100 * time.Millisecond
	backoffMax     = 3 * time.Second
)

// planLoad draws every operation from the seed: arrival times (exponential gaps, a
// Poisson process at cfg.Rate) and bodies (1-3 distinct books, 1-3 copies each).
func planLoad(cfg config, books []uuid.UUID, baseURL string) *orderLoad {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c6f6164)) // "load"
	l := &orderLoad{
		baseURL:     baseURL,
		client:      &http.Client{Timeout: attemptTimeout},
		ops:         make([]clientOp, cfg.Orders),
		at:          make([]time.Duration, cfg.Orders),
		maxInFlight: cfg.MaxInFlight,
	}
	var t float64
	for i := range cfg.Orders {
		t += rng.ExpFloat64() / cfg.Rate
		l.at[i] = time.Duration(t * float64(time.Second))
		n := 1 + rng.IntN(min(3, len(books)))
		perm := rng.Perm(len(books))[:n]
		lines := make([]orderLine, n)
		for j, b := range perm {
			lines[j] = orderLine{BookID: books[b], Quantity: 1 + rng.IntN(3)}
		}
		l.ops[i] = clientOp{
			N:     i,
			Key:   fmt.Sprintf("chaos-%d-%06d", cfg.Seed, i),
			Email: fmt.Sprintf("op-%06d@chaos.example", i),
			Lines: lines,
		}
		// Drawn for every op, so the bodies and times stay those of the same seed
		// whatever the share.
		cancel, later, after := rng.Float64(), rng.IntN(2) == 1, time.Duration(rng.Int64N(int64(2*time.Second)))
		if cancel < cfg.CancelShare {
			l.ops[i].Cancel = true
			if later {
				l.ops[i].CancelAfter = after
			}
		}
	}
	return l
}

// run sends every operation at its time and returns when all have ended.
func (l *orderLoad) run(ctx context.Context) []clientOp {
	start := time.Now()
	sem := make(chan struct{}, l.maxInFlight)
	var wg sync.WaitGroup
	for i := range l.ops {
		if !sleepCtx(ctx, time.Until(start.Add(l.at[i]))) {
			break
		}
		select {
		case sem <- struct{}{}:
		default:
			// The cap is reached: this customer waits. Counted, because an open model
			// that quietly turns closed would hide exactly the overload it should show.
			l.delayed.Add(1)
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		l.sent.Add(1)
		l.inFlight.Add(1)
		wg.Add(1)
		go func(op *clientOp) {
			defer wg.Done()
			defer func() { <-sem }()
			l.place(ctx, op)
			if op.Cancel && op.Outcome == outcomeOK {
				l.cancel(ctx, op)
			}
			l.inFlight.Add(-1)
			switch op.Outcome {
			case outcomeOK:
				l.ok.Add(1)
			case outcomeFailed:
				l.failed.Add(1)
			default:
				l.unknown.Add(1)
			}
		}(&l.ops[i])
	}
	wg.Wait()
	return l.ops[:l.sent.Load()]
}

type orderBody struct {
	CustomerEmail string      `json:"customer_email"`
	Lines         []orderLine `json:"lines"`
}

// place runs one operation to its end. An answer that proves the order was not placed
// (400, 422, a refused connection) is a definite failure; a timeout, a reset, a 5xx or a
// 409 (the same key still in flight) may hide a placed order, so once one of those is
// seen, running out of attempts makes the outcome unknown, never failed.
func (l *orderLoad) place(ctx context.Context, op *clientOp) {
	body, _ := json.Marshal(orderBody{CustomerEmail: op.Email, Lines: op.Lines})
	op.Start = time.Now()
	defer func() {
		op.End = time.Now()
		op.Latency = op.End.Sub(op.Start)
	}()
	ambiguous := false
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		op.Attempts = attempt
		status, respBody, err := l.post(ctx, op.Key, body)
		switch {
		case err != nil:
			op.Error = err.Error()
			if !refused(err) {
				ambiguous = true
			}
		case status == http.StatusCreated || status == http.StatusOK:
			var o struct {
				ID uuid.UUID `json:"id"`
			}
			if err := json.Unmarshal(respBody, &o); err != nil || o.ID == uuid.Nil {
				op.Error = fmt.Sprintf("%d with an unreadable body: %.100s", status, respBody)
				ambiguous = true
				break
			}
			op.Outcome, op.OrderID, op.Error = outcomeOK, o.ID, ""
			return
		case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
			op.Outcome, op.Error = outcomeFailed, fmt.Sprintf("%d: %.200s", status, respBody)
			if ambiguous {
				op.Outcome = outcomeUnknown
			}
			return
		default: // 409, 5xx, anything else
			op.Error = fmt.Sprintf("%d: %.200s", status, respBody)
			ambiguous = true
		}
		if ctx.Err() != nil {
			break
		}
		d := min(backoffBase<<(attempt-1), backoffMax)
		if !sleepCtx(ctx, d/2+rand.N(d/2+1)) {
			break
		}
	}
	op.Outcome = outcomeFailed
	if ambiguous {
		op.Outcome = outcomeUnknown
	}
}

// cancel cancels a placed order, right after its 201 or CancelAfter later (the first
// often overtakes the placement in inventory's queue), with its own Idempotency-Key and
// the retries of place. 200 is ok, 409 not-cancellable (rejected by then) a definite
// failure; what never got an answer stays unknown.
func (l *orderLoad) cancel(ctx context.Context, op *clientOp) {
	if !sleepCtx(ctx, op.CancelAfter) {
		return
	}
	op.CancelOutcome = outcomeUnknown
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		status, respBody, err := l.postTo(ctx, "/orders/"+op.OrderID.String()+"/cancel", op.Key+"-cancel", []byte(`{}`))
		switch {
		case err != nil:
			op.CancelError = err.Error()
		case status == http.StatusOK:
			op.CancelOutcome, op.CancelError = outcomeOK, ""
			return
		case status == http.StatusConflict && bytes.Contains(respBody, []byte("not-cancellable")):
			op.CancelOutcome, op.CancelError = outcomeFailed, fmt.Sprintf("%d: %.200s", status, respBody)
			return
		default:
			op.CancelError = fmt.Sprintf("%d: %.200s", status, respBody)
		}
		if ctx.Err() != nil {
			return
		}
		d := min(backoffBase<<(attempt-1), backoffMax)
		if !sleepCtx(ctx, d/2+rand.N(d/2+1)) {
			return
		}
	}
}

func (l *orderLoad) post(ctx context.Context, key string, body []byte) (int, []byte, error) {
	return l.postTo(ctx, "/orders", key, body)
}

func (l *orderLoad) postTo(ctx context.Context, path, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, b, nil
}

// refused reports an error that proves the request never reached a server.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// percentile returns the p-th percentile (0..1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
