package emails

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bookstore-go/bookstore/services/emailprovider/internal/store"
	"github.com/bookstore-go/bookstore/services/platform/idempotency"
)

// groupTimeout bounds a group's transaction up to its commit; past it, every email of the
// group is sent alone, under its own request's context.
const groupTimeout = 5 * time.Second

// committer is the group commit of Send: one transaction for the emails that arrived
// together. A send that finds no transaction at work goes at once, alone, as sendAlone;
// sends that arrive while one is at work wait, and the first of them then commits up to
// max of them in one transaction: BEGIN, one round trip for every key's lock and lookup
// (idempotency.DoAll), one INSERT of the new emails, COMMIT. Under load, a commit and its
// WAL flush are shared by many emails instead of paid by each.
//
// Every email is decided and answered as sendAlone would have: sent, replayed,
// ErrKeyInFlight (also for the second copy of a key in the same group) or
// ErrKeyMismatch. When the group's transaction fails, for whatever reason, each of its
// emails is sent alone, so one email's trouble never becomes its neighbours' error.
//
// No goroutine of its own: the send that commits a group is one of the group's, and when
// it is done it hands the next group to the first send waiting.
type committer struct {
	s   *Service
	max int

	mu      sync.Mutex
	busy    bool      // a transaction of the committer is at work
	waiting []*waiter // arrived while busy: the next groups, in order
}

// waiter is a send waiting for its group's transaction.
type waiter struct {
	email  outgoing
	span   trace.SpanContext // its request's span, linked from the group's
	lead   chan []*waiter    // its group, when it is the one to commit it
	answer chan answer
}

// answer is a waiter's outcome; alone: its group failed, send it alone.
type answer struct {
	sent  Sent
	err   error
	alone bool
}

// send sends e: alone if the committer is idle, otherwise in the next group.
func (c *committer) send(ctx context.Context, e outgoing) (Sent, error) {
	w := &waiter{email: e, span: trace.SpanContextFromContext(ctx), lead: make(chan []*waiter, 1), answer: make(chan answer, 1)}
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		c.commit(ctx, []*waiter{w})
	} else {
		c.waiting = append(c.waiting, w)
		c.mu.Unlock()
	}
	a := c.await(ctx, w)
	if a.alone {
		return c.s.sendAlone(ctx, e, 0)
	}
	return a.sent, a.err
}

// await returns w's answer, committing w's group first when w is the one to. A send whose
// caller gives up while it waits leaves at once, unsent; one already in a group stays
// for its answer, since its email may be committed.
func (c *committer) await(ctx context.Context, w *waiter) answer {
	done := ctx.Done()
	for {
		select {
		case a := <-w.answer:
			return a
		case group := <-w.lead:
			c.commit(ctx, group)
		case <-done:
			done = nil
			if c.leave(w) {
				return answer{err: ctx.Err()}
			}
		}
	}
}

// leave takes w out of the waiting sends; false if a group has already taken it.
func (c *committer) leave(w *waiter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.waiting, w)
	if i < 0 {
		return false
	}
	c.waiting = slices.Delete(c.waiting, i, i+1)
	return true
}

// commit sends group, answers each of its sends, and hands the next group on.
func (c *committer) commit(ctx context.Context, group []*waiter) {
	if len(group) == 1 {
		sent, err := c.s.sendAlone(ctx, group[0].email, 0)
		c.handOver()
		group[0].answer <- answer{sent: sent, err: err}
		return
	}
	answers, err := c.s.sendGroup(ctx, group)
	c.handOver()
	for i, w := range group {
		if err != nil {
			w.answer <- answer{alone: true}
			continue
		}
		w.answer <- answers[i]
	}
}

// handOver gives the next group, the first max waiting sends, to the first of them to
// commit; with none waiting the committer is idle.
func (c *committer) handOver() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) == 0 {
		c.busy = false
		return
	}
	n := min(len(c.waiting), c.max)
	next := slices.Clone(c.waiting[:n])
	c.waiting = slices.Delete(c.waiting, 0, n)
	next[0].lead <- next
}

// sendGroup is sendAlone for a group of emails in one transaction. An error is the
// group's: nothing was sent, and each email is to be sent alone.
func (s *Service) sendGroup(ctx context.Context, group []*waiter) ([]answer, error) {
	links := make([]trace.Link, len(group))
	for i, w := range group {
		links[i] = trace.Link{SpanContext: w.span}
	}
	// The group is not cut short by the caller of the send that commits it: the
	// others are still waiting for it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	defer cancel()
	ctx, span := s.tracer.Start(ctx, "SendEmail group commit", trace.WithLinks(links...),
		trace.WithAttributes(attribute.Int("bookstore.group_size", len(group))))
	defer span.End()

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, s.groupFailed(ctx, span, fmt.Errorf("begin: %w", err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	keys := make([]idempotency.Key, len(group))
	var lookup store.GetEmailsByKeysParams
	for i, w := range group {
		keys[i] = idempotency.Key{Scope: scope(w.email.account), Key: w.email.key, RequestHash: w.email.hash}
		lookup.Accounts = append(lookup.Accounts, w.email.account)
		lookup.IdempotencyKeys = append(lookup.IdempotencyKeys, w.email.key)
	}
	lookupAll := func(db *idempotency.LookupAllDB) ([]idempotency.Stored, error) {
		rows, err := store.New(db).GetEmailsByKeys(ctx, lookup)
		if err != nil {
			return nil, err
		}
		type accountKey struct{ account, key string }
		found := make(map[accountKey]store.Email, len(rows))
		for _, r := range rows {
			found[accountKey{r.Account, r.IdempotencyKey}] = r
		}
		stored := make([]idempotency.Stored, len(group))
		for i, w := range group {
			if r, ok := found[accountKey{w.email.account, w.email.key}]; ok {
				stored[i] = idempotency.Stored{RequestHash: r.RequestHash, Response: r.ResponseBody}
			}
		}
		return stored, nil
	}
	sendAll := func(fresh []int) ([][]byte, error) {
		var rows store.InsertEmailsParams
		bodies := make([][]byte, len(fresh))
		for j, i := range fresh {
			row, err := group[i].email.record()
			if err != nil {
				return nil, err
			}
			bodies[j] = row.ResponseBody
			rows.Ids = append(rows.Ids, row.ID)
			rows.Accounts = append(rows.Accounts, row.Account)
			rows.IdempotencyKeys = append(rows.IdempotencyKeys, row.IdempotencyKey)
			rows.RequestHashes = append(rows.RequestHashes, row.RequestHash)
			rows.Recipients = append(rows.Recipients, row.Recipient)
			rows.Subjects = append(rows.Subjects, row.Subject)
			rows.Bodies = append(rows.Bodies, row.Body)
			rows.ResponseBodies = append(rows.ResponseBodies, row.ResponseBody)
			rows.CreatedAts = append(rows.CreatedAts, row.CreatedAt)
		}
		if err := store.New(tx).InsertEmails(ctx, rows); err != nil {
			return nil, fmt.Errorf("record emails: %w", err)
		}
		return bodies, nil
	}
	outcomes, err := idempotency.DoAll(ctx, tx, keys, lookupAll, sendAll)
	if err == nil {
		err = tx.Commit(context.WithoutCancel(ctx)) // as in sendAlone
	}
	if err != nil {
		return nil, s.groupFailed(ctx, span, err)
	}
	s.m.groupSize.Record(ctx, int64(len(group)))
	answers := make([]answer, len(group))
	for i, o := range outcomes {
		answers[i] = answer{sent: Sent{Body: o.Response, Replayed: o.Replayed}, err: o.Err}
	}
	return answers, nil
}

// groupFailed records that a group's transaction failed and returns err.
func (s *Service) groupFailed(ctx context.Context, span trace.Span, err error) error {
	span.RecordError(err)
	s.m.groupFallbacks.Add(ctx, 1)
	s.log.DebugContext(ctx, "group commit failed; sending its emails one at a time", "err", err)
	return err
}
