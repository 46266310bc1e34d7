package check

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The checker's tests need no service: each builds a snapshot of a small healthy run,
// breaks exactly one invariant the way a faulty design would, and asserts that exactly
// that invariant fails with exactly that kind of violation.

var (
	dune   = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")
	hobbit = uuid.MustParse("018f2b1e-0000-7000-8000-000000000002")
)

// cleanSnapshot is a run in which everything went right: three orders placed (one after
// an unknown outcome), two confirmed, one rejected for lack of stock, one email each,
// one poison message injected and dead-lettered.
func cleanSnapshot() Snapshot {
	t0 := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	var s Snapshot
	statuses := []string{StatusConfirmed, StatusConfirmed, StatusRejected}
	outcomes := []outcome{OutcomeOK, OutcomeOK, OutcomeUnknown}
	for i, st := range statuses {
		id := uuid.MustParse(fmt.Sprintf("018f2b1e-1111-7000-8000-%012d", i+1))
		email := fmt.Sprintf("op-%d@chaos.example", i)
		key := fmt.Sprintf("chaos-1-%d", i)
		lines := []OrderLine{{BookID: dune, Quantity: 2}, {BookID: hobbit, Quantity: 1}}
		op := ClientOp{N: i, Key: key, Email: email, Lines: lines, Outcome: outcomes[i], Attempts: 1, Start: t0, End: t0.Add(time.Second)}
		if op.Outcome == OutcomeOK {
			op.OrderID = id
		}
		s.History = append(s.History, op)
		s.Orders = append(s.Orders, Order{ID: id, Key: key, CustomerEmail: email, Status: st, Lines: lines, CreatedAt: t0, UpdatedAt: t0.Add(time.Second)})
		kind := kindConfirmed
		if st == StatusRejected {
			kind = kindRejected
		}
		nkey := "notification-" + id.String() + "-" + kind
		s.Notifications = append(s.Notifications, NotificationRecord{OrderID: id, Kind: kind, Status: "completed", IdempotencyKey: nkey, Attempts: 1})
		s.Emails = append(s.Emails, SentEmail{ID: fmt.Sprint(i), IdempotencyKey: nkey, To: email, Deliveries: 1})
	}
	// A fourth operation failed for certain: no order, no email.
	s.History = append(s.History, ClientOp{N: 3, Key: "chaos-1-3", Email: "op-3@chaos.example", Lines: []OrderLine{{BookID: dune, Quantity: 1}}, Outcome: OutcomeFailed, Attempts: 8})
	s.Books = []Book{
		{ID: dune, Title: "Dune", OnHand: 10, Reserved: 4},
		{ID: hobbit, Title: "The Hobbit", OnHand: 2, Reserved: 2},
	}
	s.Outboxes = []Outbox{{Service: "ordering"}, {Service: "inventory"}}
	s.Queues = []Queue{{Name: "inventory.order-placed"}, {Name: "ordering.stock-events"}, {Name: "notification.stock-events"}}
	poison := PoisonMessage{Queue: "inventory.order-placed", Kind: "not-json", MessageID: "poison-1", Body: []byte("{not json"), At: t0}
	s.InjectedPoison = []PoisonMessage{poison}
	s.DeadLetters = []DeadLetter{{Queue: poison.Queue, MessageID: poison.MessageID, Body: poison.Body}}
	s.FaultChecks = []Fault{
		{ID: 7, Kind: FaultRelayTwin, Target: "ordering", Fired: true, Check: &FaultCheck{Checked: true}},
		{ID: 8, Kind: FaultBrokerAlarm, Target: "inventory", Fired: true, Check: &FaultCheck{Checked: true, Drain: 1500 * time.Millisecond}},
		{ID: 9, Kind: FaultQueueDeleted, Target: "notification.stock-events", Fired: true, Check: &FaultCheck{Checked: true}},
		// A twin that overlapped a Postgres outage is not checked: no violation, a note.
		{ID: 10, Kind: FaultRelayTwin, Target: "inventory-1", Fired: true, Check: &FaultCheck{Detail: "not checked"}},
	}
	s.Faults, s.Liveness = cleanLiveness(t0)
	return s
}

func TestACleanSnapshotPassesEveryInvariant(t *testing.T) {
	vs := Check(cleanSnapshot())
	if len(vs) != 9 {
		t.Fatalf("got %d verdicts, want one per invariant (6), the faults' own checks, the injection's and liveness", len(vs))
	}
	for _, v := range vs {
		if !v.Passed || v.Checked == 0 {
			t.Errorf("invariant %d: passed=%v checked=%d counts=%v examples=%v", v.Invariant, v.Passed, v.Checked, v.Counts, v.Examples)
		}
	}
	if n := ViolationCount(vs); n != 0 {
		t.Errorf("ViolationCount = %d, want 0", n)
	}
}

// assertOnly checks that exactly invariant n failed, with exactly the violation kinds
// given and their counts.
func assertOnly(t *testing.T, s Snapshot, n int, want map[string]int) {
	t.Helper()
	for _, v := range Check(s) {
		if v.Invariant != n {
			if !v.Passed {
				t.Errorf("invariant %d failed too: %v %v", v.Invariant, v.Counts, v.Examples)
			}
			continue
		}
		if v.Passed {
			t.Fatalf("invariant %d passed, want it to fail with %v", n, want)
		}
		if len(v.Counts) != len(want) {
			t.Errorf("invariant %d: counts %v, want %v", n, v.Counts, want)
		}
		for kind, c := range want {
			if v.Counts[kind] != c {
				t.Errorf("invariant %d: %q = %d, want %d (all: %v)", n, kind, v.Counts[kind], c, v.Counts)
			}
		}
		if len(v.Examples) == 0 {
			t.Errorf("invariant %d failed without an example", n)
		}
	}
}

func TestInvariant1CatchesASecondOrderForOneOperation(t *testing.T) {
	s := cleanSnapshot()
	// The client's retry of op 1 placed a second, identical order, which was confirmed
	// and reserved too. Both orders share the op's address, so the one email there serves
	// both for invariant 4, and the reservation is consistent: only invariant 1 can tell.
	dup := s.Orders[1]
	dup.ID = uuid.MustParse("018f2b1e-2222-7000-8000-000000000001")
	dup.Key = ""
	s.Orders = append(s.Orders, dup)
	s.Books[0].Reserved += 2
	s.Books[1].Reserved++
	s.Books[1].OnHand++
	assertOnly(t, s, 1, map[string]int{duplicateOrder: 1})
}

func TestInvariant1CatchesOrdersNoClientAskedForOrToldFailed(t *testing.T) {
	s := cleanSnapshot()
	// An order that no client asked for, and one for the operation the client was told
	// had failed, both rejected with an email each so that only invariant 1 can see them.
	for i, email := range []string{"stranger@chaos.example", s.History[3].Email} {
		id := uuid.MustParse(fmt.Sprintf("018f2b1e-3333-7000-8000-%012d", i))
		s.Orders = append(s.Orders, Order{ID: id, CustomerEmail: email, Status: StatusRejected, Lines: []OrderLine{{BookID: dune, Quantity: 1}}})
		nkey := "n-" + id.String()
		s.Notifications = append(s.Notifications, NotificationRecord{OrderID: id, Kind: kindRejected, Status: "completed", IdempotencyKey: nkey})
		s.Emails = append(s.Emails, SentEmail{IdempotencyKey: nkey, To: email, Deliveries: 1})
	}
	assertOnly(t, s, 1, map[string]int{unexpectedOrder: 1, placedAfterFailure: 1})
}

func TestInvariant1CatchesAnOrderWithOtherLinesThanRequested(t *testing.T) {
	s := cleanSnapshot()
	s.History[1].Lines = []OrderLine{{BookID: dune, Quantity: 3}, {BookID: hobbit, Quantity: 1}}
	assertOnly(t, s, 1, map[string]int{wrongLines: 1})
}

func TestInvariant1UnknownOperationsMayLandEitherWay(t *testing.T) {
	s := cleanSnapshot()
	s.History = append(s.History, ClientOp{N: 4, Key: "chaos-1-4", Email: "op-4@chaos.example", Outcome: OutcomeUnknown})
	v := Check(s)[0]
	if !v.Passed {
		t.Fatalf("an unknown operation that never landed is allowed: %v", v.Counts)
	}
	want := "unknown operations: 1 recovered (the order exists), 1 not (it was never placed); both are allowed"
	if len(v.Notes) != 1 || v.Notes[0] != want {
		t.Errorf("notes %q, want %q", v.Notes, want)
	}
}

func TestInvariant3CatchesAnOversoldBook(t *testing.T) {
	s := cleanSnapshot()
	s.Books[1].OnHand = 1
	assertOnly(t, s, 3, map[string]int{oversold: 1})
}

func TestInvariant4CatchesTwoEmailsForOneOrder(t *testing.T) {
	s := cleanSnapshot()
	// The provider accepted the email twice under two idempotency keys, both recorded.
	second := s.Emails[0]
	second.IdempotencyKey += "-retry"
	s.Emails = append(s.Emails, second)
	s.Notifications = append(s.Notifications, NotificationRecord{OrderID: s.Orders[0].ID, Kind: kindConfirmed, Status: "completed", IdempotencyKey: second.IdempotencyKey})
	assertOnly(t, s, 4, map[string]int{duplicateEmail: 1})
}

func TestInvariant4CatchesAnEmailDeliveredTwice(t *testing.T) {
	s := cleanSnapshot()
	s.Emails[1].Deliveries = 2
	assertOnly(t, s, 4, map[string]int{deliveryCount: 1})
}

func TestInvariant4CatchesAnEmailOfTheWrongKind(t *testing.T) {
	s := cleanSnapshot()
	s.Notifications[2].Kind = kindConfirmed // a rejected order told it was confirmed
	assertOnly(t, s, 4, map[string]int{wrongKindEmail: 1})
}

func TestInvariant4CatchesAnEmailForNoOrder(t *testing.T) {
	s := cleanSnapshot()
	s.Emails = append(s.Emails, SentEmail{IdempotencyKey: "stray", To: s.History[3].Email, Deliveries: 1})
	assertOnly(t, s, 4, map[string]int{unexpectedEmail: 1})
}

func TestInvariant5CatchesRecordsLeftProcessing(t *testing.T) {
	s := cleanSnapshot()
	// The email was sent and recorded, the record never completed.
	s.Notifications[0].Status = "processing"
	s.Unfinished = []unfinished{{Service: "inventory", Record: "inbox 018f2b1e", Status: "processing"}}
	assertOnly(t, s, 5, map[string]int{stuckRecord: 2})
}

func TestInvariant5CatchesAWorkQueueThatIsMissing(t *testing.T) {
	s := cleanSnapshot()
	s.Queues[2] = Queue{Name: s.Queues[2].Name, Missing: true}
	assertOnly(t, s, 5, map[string]int{queueMissing: 1})
}

func TestInvariant5CatchesMessagesLeftInAWorkQueue(t *testing.T) {
	s := cleanSnapshot()
	s.Queues[2].Messages = 4
	assertOnly(t, s, 5, map[string]int{queueNotEmpty: 1})
}

func TestInvariant6CatchesPoisonMissingDeadLetteredTwiceOrAltered(t *testing.T) {
	s := cleanSnapshot()
	// Poison that a consumer swallowed (never dead-lettered).
	s.InjectedPoison = append(s.InjectedPoison, PoisonMessage{Queue: "notification.stock-events", Kind: "unknown-type", MessageID: "poison-2", Body: []byte(`{}`)})
	// The first poison dead-lettered twice.
	s.DeadLetters = append(s.DeadLetters, s.DeadLetters[0])
	// A dead letter with an injected id but a different body is not the injected poison.
	s.DeadLetters = append(s.DeadLetters, DeadLetter{Queue: "notification.stock-events", MessageID: "poison-2", Body: []byte(`{"x":1}`)})
	assertOnly(t, s, 6, map[string]int{missingPoison: 1, poisonTwice: 1, unexpectedDead: 1})
}

func TestInvariant6PoisonInjectedTwiceIsExpectedTwice(t *testing.T) {
	s := cleanSnapshot()
	// The same message injected twice (the same id and body) must be dead-lettered twice.
	s.InjectedPoison = append(s.InjectedPoison, s.InjectedPoison[0])
	assertOnly(t, s, 6, map[string]int{missingPoison: 1})
	s.DeadLetters = append(s.DeadLetters, s.DeadLetters[0])
	if v := Check(s)[5]; !v.Passed {
		t.Errorf("two injected, two dead-lettered: %v", v.Counts)
	}
}

func TestAVerdictKeepsAtMostFiveExamplesOfAKind(t *testing.T) {
	s := cleanSnapshot()
	for i := range 50 {
		s.DeadLetters = append(s.DeadLetters, DeadLetter{Queue: "inventory.order-placed", MessageID: fmt.Sprint("stray-", i)})
	}
	v := Check(s)[5]
	if v.Counts[unexpectedDead] != 50 || len(v.Examples) != maxExamples {
		t.Errorf("counts %v, %d examples; want 50 counted and %d kept", v.Counts, len(v.Examples), maxExamples)
	}
}
