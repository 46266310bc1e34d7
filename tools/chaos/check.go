package main

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
	Examples  []Violation    `json:"examples,omitempty"` // the first few of each kind
	Notes     []string       `json:"notes,omitempty"`    // facts that are not violations
}

// Violation is one thing that must not happen, about one subject (an order, a book, a
// message).
type Violation struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
}

// Violation kinds. Each names an effect that was lost, duplicated, unexpected or stuck,
// so the scoreboard can say what a wrong design did.
const (
	LostOrder          = "lost order (201 answered, order missing)"
	DuplicateOrder     = "duplicate order for one idempotency key"
	UnexpectedOrder    = "unexpected order (no client asked for it)"
	PlacedAfterFailure = "order exists for an operation that failed"
	WrongLines         = "order lines differ from the request"
	StuckPending       = "order stuck pending (its event was lost)"
	UnknownStatus      = "order in an unknown status"
	ReservedMismatch   = "reserved differs from confirmed orders (double or lost reservation)"
	Oversold           = "on_hand - reserved below zero"
	UnknownBook        = "confirmed order reserves an unknown book"
	MissingEmail       = "order without an email"
	DuplicateEmail     = "more than one email for an order"
	DeliveryCount      = "email delivered other than exactly once"
	WrongKindEmail     = "email of the wrong kind"
	UnexpectedEmail    = "email for no order"
	OutboxNotDrained   = "outbox not drained"
	OutboxDead         = "outbox rows parked dead"
	StuckRecord        = "record left unfinished"
	QueueNotEmpty      = "messages left in a work queue"
	UnexpectedDead     = "dead letter that was not injected"
	MissingPoison      = "injected poison not dead-lettered"
	PoisonTwice        = "poison dead-lettered more than once"
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
		b.v.Examples = append(b.v.Examples, Violation{Kind: kind, Subject: subject, Detail: fmt.Sprintf(format, args...)})
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
			b.fail(DuplicateOrder, op.Key, "%d orders for one operation: %v", len(placed), orderIDs(placed))
		}
		switch op.Outcome {
		case OutcomeOK:
			o, ok := byID[op.OrderID]
			if !ok {
				b.fail(LostOrder, op.OrderID.String(), "key %s was answered with order %s, which does not exist", op.Key, op.OrderID)
				continue
			}
			if !sameLines(o.Lines, op.Lines) {
				b.fail(WrongLines, o.ID.String(), "requested %v, stored %v", op.Lines, o.Lines)
			}
		case OutcomeFailed:
			if len(placed) > 0 {
				b.fail(PlacedAfterFailure, op.Key, "the client was told it failed, but order %s exists", placed[0].ID)
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
			b.fail(UnexpectedOrder, o.ID.String(), "order for %s matches no client operation", o.CustomerEmail)
		}
	}
	b.note("unknown operations: %d recovered (the order exists), %d not (it was never placed); both are allowed", recovered, notRecovered)
	return b.done()
}

// Invariant 2: every order has reached confirmed or rejected; none is left pending.
func checkOrdersDecided(s Snapshot) Verdict {
	b := newVerdict(2, "every order confirmed or rejected, none left pending")
	for _, o := range s.Orders {
		b.v.Checked++
		switch o.Status {
		case StatusConfirmed, StatusRejected:
		case StatusPending:
			b.fail(StuckPending, o.ID.String(), "placed at %s, still pending", o.CreatedAt.Format("15:04:05.000"))
		default:
			b.fail(UnknownStatus, o.ID.String(), "status %q", o.Status)
		}
	}
	return b.done()
}

// Invariant 3: for each book, reserved equals the sum of the quantities of the confirmed
// orders' lines for it, and on_hand - reserved >= 0. A reservation made twice for one
// order (a duplicate message processed twice) shows here as reserved above the sum.
func checkReservations(s Snapshot) Verdict {
	b := newVerdict(3, "reserved = confirmed quantities per book, never oversold")
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
			b.fail(Oversold, bk.Title, "on_hand %d, reserved %d", bk.OnHand, bk.Reserved)
		}
	}
	for id, q := range want {
		if !known[id] {
			b.fail(UnknownBook, id.String(), "confirmed orders hold %d of a book inventory does not list", q)
		}
	}
	return b.done()
}

// Invariant 4: every order has exactly one email at the provider, delivered exactly once,
// of the kind that matches its status. The kind is read from the notification record
// whose idempotency key the email carries.
func checkEmails(s Snapshot) Verdict {
	b := newVerdict(4, "one email per order, delivered once, of the right kind")
	emailsTo := map[string][]Email{}
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
			want = KindConfirmed
		case StatusRejected:
			want = KindRejected
		default:
			continue // an undecided order has no outcome to tell; invariant 2 reports it
		}
		b.v.Checked++
		emails := emailsTo[o.CustomerEmail]
		switch {
		case len(emails) == 0:
			b.fail(MissingEmail, o.ID.String(), "%s order, no email to %s", o.Status, o.CustomerEmail)
			continue
		case len(emails) > 1:
			b.fail(DuplicateEmail, o.ID.String(), "%d emails to %s", len(emails), o.CustomerEmail)
		}
		for _, e := range emails {
			if e.Deliveries != 1 {
				b.fail(DeliveryCount, o.ID.String(), "email %s delivered %d times", e.IdempotencyKey, e.Deliveries)
			}
			if got := kindOfKey[e.IdempotencyKey]; got != want {
				b.fail(WrongKindEmail, o.ID.String(), "%s order, email %s is %q", o.Status, e.IdempotencyKey, cmp.Or(got, "of no notification record"))
			}
		}
	}
	for _, to := range slices.Sorted(maps.Keys(emailsTo)) {
		if !orderEmails[to] {
			b.fail(UnexpectedEmail, to, "%d emails to an address no order has", len(emailsTo[to]))
		}
	}
	return b.done()
}

// Invariant 5: every outbox is drained; no inbox or notification record is left
// processing. A message left in a work queue after the quiet period is unfinished work
// too.
func checkNothingStuck(s Snapshot) Verdict {
	b := newVerdict(5, "outboxes drained, no record left processing, queues empty")
	for _, o := range s.Outboxes {
		b.v.Checked++
		if o.Pending > 0 {
			b.fail(OutboxNotDrained, o.Service, "%d rows still pending", o.Pending)
		}
		if o.Dead > 0 {
			b.fail(OutboxDead, o.Service, "%d rows parked after too many failed publishes", o.Dead)
		}
	}
	for _, u := range s.Unfinished {
		b.fail(StuckRecord, u.Service+" "+u.Record, "status %q", u.Status)
	}
	for _, n := range s.Notifications {
		b.v.Checked++
		if n.Status == "processing" || n.Status == "needs-reconciliation" {
			b.fail(StuckRecord, "notification "+n.OrderID.String(), "%s record %q after %d attempts", n.Kind, n.Status, n.Attempts)
		}
	}
	for _, q := range s.Queues {
		b.v.Checked++
		if q.Messages > 0 {
			b.fail(QueueNotEmpty, q.Name, "%d messages", q.Messages)
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
	injected := map[key]Poison{}
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
			b.fail(UnexpectedDead, d.Queue+" "+d.MessageID, "%s%s", why, describeBody(d.Body))
			continue
		}
		seen[k]++
		if seen[k] == want[k]+1 {
			b.fail(PoisonTwice, d.Queue+" "+d.MessageID, "%s poison", p.Kind)
		}
	}
	byKind := map[string]int{}
	for _, p := range s.InjectedPoison {
		byKind[p.Kind]++
		k := key{p.Queue, p.MessageID}
		if seen[k] < want[k] {
			seen[k]++ // one missing copy reported once
			b.fail(MissingPoison, p.Queue+" "+p.MessageID, "%s poison injected at %s is not in %s.dlq", p.Kind, p.At.Format("15:04:05.000"), p.Queue)
		}
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	b.note("injected %d poison messages (%s), found %d dead letters", len(s.InjectedPoison), strings.Join(kinds, ", "), len(s.DeadLetters))
	return b.done()
}

func orderIDs(os []Order) []string {
	ids := make([]string, len(os))
	for i, o := range os {
		ids[i] = o.ID.String()
	}
	return ids
}

func sameLines(a, b []Line) bool {
	if len(a) != len(b) {
		return false
	}
	sorted := func(ls []Line) []Line {
		out := slices.Clone(ls)
		slices.SortFunc(out, func(x, y Line) int { return strings.Compare(x.BookID.String(), y.BookID.String()) })
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
