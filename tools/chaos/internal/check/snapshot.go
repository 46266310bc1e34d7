package check

import (
	"time"

	"github.com/google/uuid"
)

// Try is one HTTP attempt as the client saw it: when it was sent, how long the answer
// took, its status (0: none, a timeout or a broken connection).
type Try struct {
	At         time.Time     `json:"at"`
	Took       time.Duration `json:"took_ns"`
	Status     int           `json:"status,omitempty"`
	RetryAfter bool          `json:"retry_after,omitempty"` // the answer carried Retry-After
	Timeout    bool          `json:"timeout,omitempty"`     // no answer within the attempt's timeout
}

// Snapshot is everything the checker looks at: what the clients were told (History),
// what the system holds after it went quiet (orders, books, notifications, emails,
// outboxes, queues, dead letters) and what the harness did to it on purpose (the poison
// it injected). The collector fills one from the real databases, APIs and queues; the
// checker's unit tests build one by hand. The checker sees nothing else, so a verdict
// can always be re-derived from report.json.
type Snapshot struct {
	History        []ClientOp           `json:"history"`
	Orders         []Order              `json:"orders"`
	Books          []Book               `json:"books"`
	Notifications  []NotificationRecord `json:"notifications"`
	Emails         []SentEmail          `json:"emails"`
	Outboxes       []Outbox             `json:"outboxes"`
	Unfinished     []unfinished         `json:"unfinished"`
	Queues         []Queue              `json:"queues"`
	DeadLetters    []DeadLetter         `json:"dead_letters"`
	InjectedPoison []PoisonMessage      `json:"injected_poison"`
	// FaultChecks are the faults that have their own check (faults/heavy.go), with its result.
	FaultChecks []Fault `json:"fault_checks,omitempty"`
	// Faults is the whole schedule with what became of each fault: checkInjection looks
	// for the harness's own errors, checkLiveness for the windows the bound leaves out.
	Faults []Fault `json:"faults,omitempty"`
	// Liveness is what the harness sampled of the relays during the run (checkLiveness).
	Liveness *Liveness `json:"liveness,omitempty"`
}

// outcome is what a client learned about one operation, Jepsen-style: ok (the API said
// 201 or replayed it), failed (it certainly did not happen) or unknown (a timeout, a
// reset, a 5xx: it may or may not have happened).
type outcome string

const (
	OutcomeOK      outcome = "ok"
	OutcomeFailed  outcome = "failed"
	OutcomeUnknown outcome = "unknown"
)

// OrderLine is one book and quantity of an order.
type OrderLine struct {
	BookID   uuid.UUID `json:"book_id"`
	Quantity int       `json:"quantity"`
}

// ClientOp is one client operation: placing one order under one Idempotency-Key, with
// every retry of it. Each op uses its own customer email, so its effects (orders, emails)
// can be found by address even where no key links them.
type ClientOp struct {
	N        int           `json:"n"`
	Key      string        `json:"key"`
	Email    string        `json:"customer_email"`
	Lines    []OrderLine   `json:"lines"`
	Outcome  outcome       `json:"outcome"`
	OrderID  uuid.UUID     `json:"order_id,omitzero"`
	Attempts int           `json:"attempts"`
	Start    time.Time     `json:"start"`
	End      time.Time     `json:"end"`
	Latency  time.Duration `json:"latency_ns"`
	Error    string        `json:"error,omitempty"`
	// Shed counts the 503s with Retry-After: ordering refused the request before doing
	// anything. An operation that ends failed with Shed > 0 was rejected: told to come
	// back later, its order certainly not placed (the checker holds it to that).
	Shed  int   `json:"shed,omitempty"`
	Tries []Try `json:"tries,omitempty"` // every POST /orders attempt

	// Cancel: the load cancels this order once placed, after CancelAfter (0: at once).
	Cancel        bool          `json:"cancel,omitempty"`
	CancelAfter   time.Duration `json:"cancel_after_ns,omitempty"`
	CancelOutcome outcome       `json:"cancel_outcome,omitempty"` // ok: 200; failed: 409 not-cancellable or never sent
	CancelError   string        `json:"cancel_error,omitempty"`
}

// Order is an order as the ordering database holds it; Key is the Idempotency-Key that
// placed it ("" when none did).
type Order struct {
	ID            uuid.UUID   `json:"id"`
	Key           string      `json:"key"`
	CustomerEmail string      `json:"customer_email"`
	Status        string      `json:"status"`
	Lines         []OrderLine `json:"lines"`
	CreatedAt     time.Time   `json:"created_at"`
	UpdatedAt     time.Time   `json:"updated_at"`
}

// Book is one title as inventory's GET /books shows it.
type Book struct {
	ID       uuid.UUID `json:"id"`
	Title    string    `json:"title"`
	OnHand   int       `json:"on_hand"`
	Reserved int       `json:"reserved"`
}

// NotificationRecord is one record of notification's GET /notifications.
type NotificationRecord struct {
	OrderID        uuid.UUID `json:"order_id"`
	Kind           string    `json:"kind"`
	Status         string    `json:"status"`
	IdempotencyKey string    `json:"idempotency_key"`
	Attempts       int       `json:"attempts"`
}

// SentEmail is one email as the provider's GET /v1/emails lists it.
type SentEmail struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	To             string `json:"to"`
	Subject        string `json:"subject"`
	Deliveries     int    `json:"deliveries"`
	// CreatedAt is when the provider accepted it: the emailed rate of the report.
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// Outbox counts the rows of one service's outbox that are not published.
type Outbox struct {
	Service string `json:"service"`
	Pending int    `json:"pending"`
	Dead    int    `json:"dead"`
}

// unfinished is a record a service started and did not finish: an inbox row still
// "processing", a notification not completed.
type unfinished struct {
	Service string `json:"service"`
	Record  string `json:"record"`
	Status  string `json:"status"`
}

// Queue is one work queue and how many messages it still holds (ready and unacked).
type Queue struct {
	Name     string `json:"name"`
	Messages int    `json:"messages"`
	Missing  bool   `json:"missing,omitempty"` // the queue does not exist (deleted, and nobody declared it again)
}

// DeadLetter is one message the harness took out of a dead-letter queue.
type DeadLetter struct {
	Queue     string `json:"queue"` // the work queue it was dead-lettered from
	MessageID string `json:"message_id"`
	Body      []byte `json:"body"`
	// Why RabbitMQ dead-lettered it (x-first-death-reason): "rejected" by a consumer, or
	// "delivery_limit" when it was returned to the queue too often, and how often
	// (x-delivery-count, when the broker keeps it). Only for the report: a violation
	// says which it was.
	Reason        string `json:"reason,omitempty"`
	DeliveryCount int64  `json:"delivery_count,omitempty"`
}

// PoisonMessage is one poison message the harness injected into a work queue.
type PoisonMessage struct {
	Queue     string    `json:"queue"`
	Kind      string    `json:"kind"`
	MessageID string    `json:"message_id"`
	Body      []byte    `json:"body"`
	At        time.Time `json:"at"`
}

// Kinds of email, from the notification contract.
const (
	kindConfirmed = "order-confirmed"
	kindRejected  = "order-rejected"
	kindCancelled = "order-cancelled"
)

// Order statuses, from the ordering contract.
const (
	StatusPending   = "pending"
	StatusConfirmed = "confirmed"
	StatusRejected  = "rejected"
	StatusCancelled = "cancelled"
)
