// Package check is the chaos run's checker: it takes a Snapshot (plain data: what the
// clients were told, what the system holds after it went quiet, what the harness did to
// it) and returns one Verdict per invariant of docs/contracts.md. It asks no service
// anything, so every verdict can be re-derived from a run's snapshot.json.
package check

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// Verdict is the checker's answer for one invariant of the contracts.
type Verdict struct {
	Invariant int            `json:"invariant"`
	Title     string         `json:"title"`
	Passed    bool           `json:"passed"`
	Checked   int            `json:"checked"`            // how many things were looked at
	Counts    map[string]int `json:"counts,omitempty"`   // violations by kind
	Examples  []violation    `json:"examples,omitempty"` // the first few of each kind
	Notes     []string       `json:"notes,omitempty"`    // facts that are not violations
}

// violation is one thing that must not happen, about one subject (an order, a book, a
// message).
type violation struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
}

// Violation kinds. Each names an effect that was lost, duplicated, unexpected or stuck,
// so the scoreboard can say what a wrong design did.
const (
	lostOrder          = "lost order (201 answered, order missing)"
	duplicateOrder     = "duplicate order for one idempotency key"
	unexpectedOrder    = "unexpected order (no client asked for it)"
	placedAfterFailure = "order exists for an operation that failed"
	wrongLines         = "order lines differ from the request"
	stuckPending       = "order stuck pending (its event was lost)"
	lostCancellation   = "cancellation lost (200 answered, order not cancelled)"
	unexpectedCancel   = "order cancelled that no client cancelled"
	missingCancelEmail = "cancelled order without its cancellation email"
	unknownStatus      = "order in an unknown status"
	ReservedMismatch   = "reserved differs from confirmed orders (double or lost reservation)"
	oversold           = "on_hand - reserved below zero"
	unknownBook        = "confirmed order reserves an unknown book"
	missingEmail       = "order without an email"
	duplicateEmail     = "more than one email for an order"
	deliveryCount      = "email delivered other than exactly once"
	wrongKindEmail     = "email of the wrong kind"
	unexpectedEmail    = "email for no order"
	outboxNotDrained   = "outbox not drained"
	outboxDead         = "outbox rows parked dead"
	stuckRecord        = "record left unfinished"
	queueNotEmpty      = "messages left in a work queue"
	queueMissing       = "work queue missing"
	unexpectedDead     = "dead letter that was not injected"
	missingPoison      = "injected poison not dead-lettered"
	poisonTwice        = "poison dead-lettered more than once"
)

// maxExamples bounds the examples kept per kind, so a design that fails on every order
// still writes a readable report.
const maxExamples = 5

// Check runs every invariant of the contracts against s. It is a pure function of the
// snapshot: no service is asked anything.
func Check(s Snapshot) []Verdict {
	return []Verdict{
		checkOrdersPlaced(s),
		checkOrdersDecided(s),
		checkReservations(s),
		checkEmails(s),
		checkNothingStuck(s),
		checkDeadLetters(s),
		checkFaults(s),
		checkInjection(s),
		checkLiveness(s),
	}
}

// Passed reports whether every verdict passed.
func Passed(vs []Verdict) bool {
	for _, v := range vs {
		if !v.Passed {
			return false
		}
	}
	return true
}

// ViolationCount adds up every violation of every verdict.
func ViolationCount(vs []Verdict) int {
	n := 0
	for _, v := range vs {
		for _, c := range v.Counts {
			n += c
		}
	}
	return n
}

type verdictBuilder struct{ v Verdict }

func newVerdict(n int, title string) *verdictBuilder {
	return &verdictBuilder{v: Verdict{Invariant: n, Title: title, Counts: map[string]int{}}}
}

func (b *verdictBuilder) fail(kind, subject, format string, args ...any) {
	b.v.Counts[kind]++
	if b.v.Counts[kind] <= maxExamples {
		b.v.Examples = append(b.v.Examples, violation{Kind: kind, Subject: subject, Detail: fmt.Sprintf(format, args...)})
	}
}

func (b *verdictBuilder) note(format string, args ...any) {
	b.v.Notes = append(b.v.Notes, fmt.Sprintf(format, args...))
}

func (b *verdictBuilder) done() Verdict {
	b.v.Passed = len(b.v.Counts) == 0
	if b.v.Passed {
		b.v.Counts = nil
	}
	return b.v
}

// Invariant 1: every order the API answered 201 for exists; no order exists twice for
// one idempotency key. Also: no order exists that no client asked for, none for an
// operation that certainly failed, and each has the lines its client sent. Unknown
// operations may land either way; they are counted as recovered (placed) or not.
func checkOrdersPlaced(s Snapshot) Verdict {
	b := newVerdict(1, "every 201 order exists, at most one order per idempotency key")
	byID := map[uuid.UUID]Order{}
	byEmail := map[string][]Order{}
	byKey := map[string][]Order{}
	for _, o := range s.Orders {
		byID[o.ID] = o
		byEmail[o.CustomerEmail] = append(byEmail[o.CustomerEmail], o)
		if o.Key != "" {
			byKey[o.Key] = append(byKey[o.Key], o)
		}
	}
	opEmails := map[string]bool{}
	recovered, notRecovered := 0, 0
	for _, op := range s.History {
		b.v.Checked++
		opEmails[op.Email] = true
		placed := byEmail[op.Email]
		if len(byKey[op.Key]) > len(placed) {
			placed = byKey[op.Key]
		}
		if len(placed) > 1 {
			b.fail(duplicateOrder, op.Key, "%d orders for one operation: %v", len(placed), orderIDs(placed))
		}
		switch op.Outcome {
		case OutcomeOK:
			o, ok := byID[op.OrderID]
			if !ok {
				b.fail(lostOrder, op.OrderID.String(), "key %s was answered with order %s, which does not exist", op.Key, op.OrderID)
				continue
			}
			if !sameLines(o.Lines, op.Lines) {
				b.fail(wrongLines, o.ID.String(), "requested %v, stored %v", op.Lines, o.Lines)
			}
		case OutcomeFailed:
			if len(placed) > 0 {
				b.fail(placedAfterFailure, op.Key, "the client was told it failed, but order %s exists", placed[0].ID)
			}
		case OutcomeUnknown:
			if len(placed) > 0 {
				recovered++
			} else {
				notRecovered++
			}
		}
	}
	for _, o := range s.Orders {
		if !opEmails[o.CustomerEmail] {
			b.fail(unexpectedOrder, o.ID.String(), "order for %s matches no client operation", o.CustomerEmail)
		}
	}
	b.note("unknown operations: %d recovered (the order exists), %d not (it was never placed); both are allowed", recovered, notRecovered)
	return b.done()
}

// Invariant 2: every order has reached confirmed, rejected or cancelled; none is left
// pending. An order is cancelled if and only if a client cancelled it (an unknown
// cancellation may land either way).
func checkOrdersDecided(s Snapshot) Verdict {
	b := newVerdict(2, "every order confirmed, rejected or cancelled (as its client asked), none left pending")
	cancelOf := map[string]outcome{}
	for _, op := range s.History {
		if op.Cancel {
			cancelOf[op.Email] = op.CancelOutcome
		}
	}
	for _, o := range s.Orders {
		b.v.Checked++
		asked := cancelOf[o.CustomerEmail]
		switch {
		case asked == OutcomeOK && o.Status != StatusCancelled:
			b.fail(lostCancellation, o.ID.String(), "cancel answered 200, order %s", o.Status)
		case o.Status == StatusCancelled && asked != OutcomeOK && asked != OutcomeUnknown:
			b.fail(unexpectedCancel, o.ID.String(), "cancelled, its client's cancel was %q", cmp.Or(string(asked), "never sent"))
		}
		switch o.Status {
		case StatusConfirmed, StatusRejected, StatusCancelled:
		case StatusPending:
			b.fail(stuckPending, o.ID.String(), "placed at %s, still pending", o.CreatedAt.Format("15:04:05.000"))
		default:
			b.fail(unknownStatus, o.ID.String(), "status %q", o.Status)
		}
	}
	return b.done()
}

// Invariant 3 (and 7): for each book, reserved equals the sum of the quantities of the
// confirmed (and so not cancelled) orders' lines for it, and on_hand - reserved >= 0. A
// reservation made twice for one order (a duplicate message processed twice) shows here
// as reserved above the sum, and so does a cancelled order still holding copies (a
// placement applied after its cancellation, the sequence ignored).
func checkReservations(s Snapshot) Verdict {
	b := newVerdict(3, "reserved = confirmed, not cancelled, quantities per book, never oversold")
	want := map[uuid.UUID]int{}
	for _, o := range s.Orders {
		if o.Status != StatusConfirmed {
			continue
		}
		for _, l := range o.Lines {
			want[l.BookID] += l.Quantity
		}
	}
	known := map[uuid.UUID]bool{}
	for _, bk := range s.Books {
		b.v.Checked++
		known[bk.ID] = true
		if bk.Reserved != want[bk.ID] {
			b.fail(ReservedMismatch, bk.Title, "reserved %d, confirmed orders hold %d (%+d)", bk.Reserved, want[bk.ID], bk.Reserved-want[bk.ID])
		}
		if bk.OnHand-bk.Reserved < 0 {
			b.fail(oversold, bk.Title, "on_hand %d, reserved %d", bk.OnHand, bk.Reserved)
		}
	}
	for id, q := range want {
		if !known[id] {
			b.fail(unknownBook, id.String(), "confirmed orders hold %d of a book inventory does not list", q)
		}
	}
	return b.done()
}

// Invariant 4: every order has exactly one email at the provider, delivered exactly once,
// of the kind that matches its status. The kind is read from the notification record
// whose idempotency key the email carries.
func checkEmails(s Snapshot) Verdict {
	b := newVerdict(4, "one email per order, delivered once, of the right kind")
	emailsTo := map[string][]SentEmail{}
	for _, e := range s.Emails {
		emailsTo[e.To] = append(emailsTo[e.To], e)
	}
	kindOfKey := map[string]string{}
	for _, n := range s.Notifications {
		kindOfKey[n.IdempotencyKey] = n.Kind
	}
	orderEmails := map[string]bool{}
	for _, o := range s.Orders {
		orderEmails[o.CustomerEmail] = true
		var want string
		switch o.Status {
		case StatusConfirmed:
			want = kindConfirmed
		case StatusRejected:
			want = kindRejected
		case StatusCancelled:
			b.v.Checked++
			checkCancelledEmails(b, o, emailsTo[o.CustomerEmail], kindOfKey)
			continue
		default:
			continue // an undecided order has no outcome to tell; invariant 2 reports it
		}
		b.v.Checked++
		emails := emailsTo[o.CustomerEmail]
		switch {
		case len(emails) == 0:
			b.fail(missingEmail, o.ID.String(), "%s order, no email to %s", o.Status, o.CustomerEmail)
			continue
		case len(emails) > 1:
			b.fail(duplicateEmail, o.ID.String(), "%d emails to %s", len(emails), o.CustomerEmail)
		}
		for _, e := range emails {
			if e.Deliveries != 1 {
				b.fail(deliveryCount, o.ID.String(), "email %s delivered %d times", e.IdempotencyKey, e.Deliveries)
			}
			if got := kindOfKey[e.IdempotencyKey]; got != want {
				b.fail(wrongKindEmail, o.ID.String(), "%s order, email %s is %q", o.Status, e.IdempotencyKey, cmp.Or(got, "of no notification record"))
			}
		}
	}
	for _, to := range slices.Sorted(maps.Keys(emailsTo)) {
		if !orderEmails[to] {
			b.fail(unexpectedEmail, to, "%d emails to an address no order has", len(emailsTo[to]))
		}
	}
	return b.done()
}

// checkCancelledEmails is invariant 4 (and 9) for a cancelled order: exactly one
// cancellation email, delivered once, and besides it at most one email of its outcome
// (confirmed, or rejected when inventory answered before it saw the cancellation; none
// when the cancellation came first), delivered once.
func checkCancelledEmails(b *verdictBuilder, o Order, emails []SentEmail, kindOfKey map[string]string) {
	byKind := map[string]int{}
	for _, e := range emails {
		kind := kindOfKey[e.IdempotencyKey]
		byKind[kind]++
		if e.Deliveries != 1 {
			b.fail(deliveryCount, o.ID.String(), "email %s delivered %d times", e.IdempotencyKey, e.Deliveries)
		}
		if kind != kindCancelled && kind != kindConfirmed && kind != kindRejected {
			b.fail(wrongKindEmail, o.ID.String(), "cancelled order, email %s is %q", e.IdempotencyKey, cmp.Or(kind, "of no notification record"))
		}
	}
	switch {
	case byKind[kindCancelled] == 0:
		b.fail(missingCancelEmail, o.ID.String(), "no %s email to %s", kindCancelled, o.CustomerEmail)
	case byKind[kindCancelled] > 1 || byKind[kindConfirmed]+byKind[kindRejected] > 1:
		b.fail(duplicateEmail, o.ID.String(), "%d emails to %s: %v", len(emails), o.CustomerEmail, byKind)
	}
}

// Invariant 5: every outbox is drained; no inbox or notification record is left
// processing. A message left in a work queue after the quiet period is unfinished work
// too.
func checkNothingStuck(s Snapshot) Verdict {
	b := newVerdict(5, "outboxes drained, no record left processing, queues empty")
	for _, o := range s.Outboxes {
		b.v.Checked++
		if o.Pending > 0 {
			b.fail(outboxNotDrained, o.Service, "%d rows still pending", o.Pending)
		}
		if o.Dead > 0 {
			b.fail(outboxDead, o.Service, "%d rows parked after too many failed publishes", o.Dead)
		}
	}
	for _, u := range s.Unfinished {
		b.fail(stuckRecord, u.Service+" "+u.Record, "status %q", u.Status)
	}
	for _, n := range s.Notifications {
		b.v.Checked++
		if n.Status == "processing" || n.Status == "needs-reconciliation" {
			b.fail(stuckRecord, "notification "+n.OrderID.String(), "%s record %q after %d attempts", n.Kind, n.Status, n.Attempts)
		}
	}
	for _, q := range s.Queues {
		b.v.Checked++
		if q.Missing {
			b.fail(queueMissing, q.Name, "the queue does not exist: its consumer gets nothing")
		}
		if q.Messages > 0 {
			b.fail(queueNotEmpty, q.Name, "%d messages", q.Messages)
		}
	}
	return b.done()
}

// Invariant 6: the dead-letter queues hold exactly the poison messages that were
// injected, nothing else. Messages are matched by queue and message id, and the body
// must be the one injected.
func checkDeadLetters(s Snapshot) Verdict {
	b := newVerdict(6, "dead-letter queues hold exactly the injected poison")
	// Counted as multisets: a message injected twice must be dead-lettered twice.
	type key struct{ queue, id string }
	injected := map[key]PoisonMessage{}
	want := map[key]int{}
	for _, p := range s.InjectedPoison {
		k := key{p.Queue, p.MessageID}
		injected[k] = p
		want[k]++
	}
	seen := map[key]int{}
	for _, d := range s.DeadLetters {
		b.v.Checked++
		k := key{d.Queue, d.MessageID}
		p, ok := injected[k]
		if !ok || !bytes.Equal(p.Body, d.Body) {
			why := ""
			switch {
			case d.Reason != "" && d.DeliveryCount > 0:
				why = fmt.Sprintf("dead-lettered as %s after %d deliveries: ", d.Reason, d.DeliveryCount)
			case d.Reason != "":
				why = fmt.Sprintf("dead-lettered as %s: ", d.Reason)
			}
			b.fail(unexpectedDead, d.Queue+" "+d.MessageID, "%s%s", why, describeBody(d.Body))
			continue
		}
		seen[k]++
		if seen[k] == want[k]+1 {
			b.fail(poisonTwice, d.Queue+" "+d.MessageID, "%s poison", p.Kind)
		}
	}
	byKind := map[string]int{}
	for _, p := range s.InjectedPoison {
		byKind[p.Kind]++
		k := key{p.Queue, p.MessageID}
		if seen[k] < want[k] {
			seen[k]++ // one missing copy reported once
			b.fail(missingPoison, p.Queue+" "+p.MessageID, "%s poison injected at %s is not in %s.dlq", p.Kind, p.At.Format("15:04:05.000"), p.Queue)
		}
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	b.note("injected %d poison messages (%s), found %d dead letters", len(s.InjectedPoison), strings.Join(kinds, ", "), len(s.DeadLetters))
	return b.done()
}

// Invariant 10 (the checker's own, after the contracts' nine): each fault that has a
// check of its own passed it. A relay twin published nothing while the live relay under
// its RELAY_ID held the id's lock (its copies would be absorbed by the consumers' inboxes,
// so no other invariant sees them); every outbox row written before a broker alarm ended
// was published within faults.AlarmDrainLimit; a deleted queue was declared again.
func checkFaults(s Snapshot) Verdict {
	b := newVerdict(10, "each heavy fault's own check: twins publish nothing, alarms drain, queues come back")
	unchecked := map[string]int{}
	for _, f := range s.FaultChecks {
		if f.Check == nil {
			continue
		}
		if !f.Check.Checked {
			unchecked[f.Kind]++
			continue
		}
		b.v.Checked++
		if f.Check.Violation != "" {
			b.fail(f.Check.Violation, fmt.Sprintf("%s %d (%s)", f.Kind, f.ID, f.Target), "%s", f.Check.Detail)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(unchecked)) {
		b.note("%d %s faults not checked (their notes say why)", unchecked[k], k)
	}
	return b.done()
}

func orderIDs(os []Order) []string {
	ids := make([]string, len(os))
	for i, o := range os {
		ids[i] = o.ID.String()
	}
	return ids
}

func sameLines(a, b []OrderLine) bool {
	if len(a) != len(b) {
		return false
	}
	sorted := func(ls []OrderLine) []OrderLine {
		out := slices.Clone(ls)
		slices.SortFunc(out, func(x, y OrderLine) int { return strings.Compare(x.BookID.String(), y.BookID.String()) })
		return out
	}
	return slices.Equal(sorted(a), sorted(b))
}

func describeBody(body []byte) string {
	const max = 120
	s := string(body)
	if len(s) > max {
		s = s[:max] + "…"
	}
	sum := sha256.Sum256(body)
	return fmt.Sprintf("%q (sha256 %x…)", s, sum[:6])
}
