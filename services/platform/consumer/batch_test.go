package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/testenv"
)

// batchRun is the harness's consumer with a batch handler beside its single handler. Both
// record each message's work in the work table through the real inbox (inbox.ProcessAll
// for a batch, inbox.Process alone), so one row per message id means each message was
// processed once, whichever handler did it. Each handler call also waits at the gate
// while it is shut, so that a test can let deliveries pile up behind busy workers.
type batchRun struct {
	*harness
	metrics string // the consumer's /metrics, served as a service serves it

	gate    chan struct{} // nil or closed: open
	waiting atomic.Int32  // handler calls that have reached the gate
	// failBatches: the batch handler fails this many more calls, after its work was
	// written inside the transaction (which rolls it back).
	failBatches atomic.Int32

	mu      sync.Mutex
	batches [][]string     // the message ids of each batch handler call, in call order
	failed  [][]string     // those of the calls that failed
	singles map[string]int // single handler calls per message id
}

var errBatchFailed = errors.New("batch failed (simulated)")

func newBatchRun(t *testing.T) *batchRun {
	t.Helper()
	return &batchRun{harness: newHarness(t), singles: map[string]int{}}
}

// start runs the consumer with the batch handler, BatchSize 16 and Concurrency 2, changed
// by tune, and stops it when the test ends.
func (b *batchRun) start(t *testing.T, tune ...func(*consumer.Config)) *consumer.Consumer {
	t.Helper()
	tel := telemetryFor(t)
	srv := httptest.NewServer(tel.Metrics)
	t.Cleanup(srv.Close)
	b.metrics = srv.URL
	conn := broker.NewConn(b.amqpURL, "consumer-test")
	cfg := consumer.Config{
		Name: "test", Queue: testenv.ExampleQueue, Types: []string{testenv.ExampleType}, Topology: sut.Topology, Producer: testenv.Login(b.amqpURL),
		Concurrency: 2, Batch: b.handleBatch, BatchSize: 16,
		RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Healthy: b.db.Ping,
	}
	for _, f := range tune {
		f(&cfg)
	}
	c, err := consumer.New(conn, tel, cfg, b.handle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return c
}

func (b *batchRun) wait() {
	if b.gate != nil {
		b.waiting.Add(1)
		<-b.gate
	}
}

// poisonous reports whether an event's data asks the handlers to refuse it as poison, as
// a handler refuses an event whose data it cannot use.
func poisonous(env event.Envelope) bool {
	var d struct{ Poison bool }
	_ = json.Unmarshal(env.Data, &d)
	return d.Poison
}

func (b *batchRun) handle(ctx context.Context, env event.Envelope) (inbox.Outcome, error) {
	b.wait()
	b.mu.Lock()
	b.singles[env.ID]++
	b.mu.Unlock()
	if poisonous(env) {
		return 0, event.Poison(event.ReasonInvalidData, errors.New("the handler refuses this event"))
	}
	return b.harness.handle(ctx, env)
}

func (b *batchRun) handleBatch(ctx context.Context, msgs []inbox.Message) ([]inbox.Outcome, error) {
	b.wait()
	envs := make([]event.Envelope, len(msgs))
	ids := make([]string, len(msgs))
	uuids := make([]uuid.UUID, len(msgs))
	subjects := make([]string, len(msgs))
	for i, m := range msgs {
		envs[i], ids[i], uuids[i], subjects[i] = m.Envelope, m.Envelope.ID, m.Envelope.UUID(), m.Envelope.Subject
	}
	b.mu.Lock()
	b.batches = append(b.batches, ids)
	b.mu.Unlock()
	fail := func(err error) ([]inbox.Outcome, error) {
		b.mu.Lock()
		b.failed = append(b.failed, ids)
		b.mu.Unlock()
		return nil, err
	}
	for _, env := range envs {
		if poisonous(env) {
			return fail(event.Poison(event.ReasonInvalidData, errors.New("the handler refuses an event of the batch")))
		}
	}
	failing := b.takeFailure()
	err := inbox.ProcessAll(ctx, b.db, "test", envs, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO work SELECT unnest($1::uuid[]), unnest($2::text[])", uuids, subjects); err != nil {
			return err
		}
		if failing {
			return errBatchFailed
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	outcomes := make([]inbox.Outcome, len(msgs))
	for i := range outcomes {
		outcomes[i] = inbox.Processed
	}
	return outcomes, nil
}

func (b *batchRun) takeFailure() bool {
	for {
		n := b.failBatches.Load()
		if n <= 0 {
			return false
		}
		if b.failBatches.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// snapshot returns copies of what the handlers saw.
func (b *batchRun) snapshot() (batches, failed [][]string, singles map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.batches), slices.Clone(b.failed), maps.Clone(b.singles)
}

// metric reads one of the consumer's metrics, for the consumer "test".
func (b *batchRun) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testenv.Metric(t, b.metrics, name, append([]string{`consumer="test"`}, labels...)...)
}

// valid returns n distinct OrderPlaced events and their messages.
func valid(t *testing.T, n int) ([]event.Envelope, []broker.Message) {
	t.Helper()
	envs := make([]event.Envelope, n)
	msgs := make([]broker.Message, n)
	for i := range n {
		envs[i], msgs[i] = message(t, map[string]any{"n": i})
	}
	return envs, msgs
}

func message(t *testing.T, data any) (event.Envelope, broker.Message) {
	t.Helper()
	env, _ := envelope(t, uuid.NewString(), data)
	m, err := broker.EventMessage(env, "ordering")
	if err != nil {
		t.Fatal(err)
	}
	return env, m
}

// workRows returns how many work rows each message id has.
func (b *batchRun) workRows(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT message_id::text, count(*) FROM work GROUP BY message_id")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// processedOnce checks that each of envs has exactly one work row and nothing else has
// any.
func (b *batchRun) processedOnce(t *testing.T, envs []event.Envelope) {
	t.Helper()
	rows := b.workRows(t)
	for _, env := range envs {
		if n := rows[env.ID]; n != 1 {
			t.Errorf("message %s processed %d times, want once", env.ID, n)
		}
	}
	if len(rows) != len(envs) {
		t.Errorf("%d messages have work rows, want %d", len(rows), len(envs))
	}
}

// queuesEmpty checks that the queue holds nothing ready and its DLQ holds want.
func (b *batchRun) queuesEmpty(t *testing.T, wantDead int) {
	t.Helper()
	if n := testenv.QueueDepth(t, b.amqpURL, testenv.ExampleQueue); n != 0 {
		t.Errorf("queue still holds %d messages", n)
	}
	if n := testenv.QueueDepth(t, b.amqpURL, testenv.ExampleQueue+".dlq"); n != wantDead {
		t.Errorf("DLQ holds %d messages, want %d", n, wantDead)
	}
}

// holdUntilPrefetched shuts the gate, starts the consumer, and opens the gate once both
// workers are held in a handler and the broker has pushed the consumer all it may: the
// queue is down to ready. What the workers take next is what piled up meanwhile.
func (b *batchRun) holdUntilPrefetched(t *testing.T, ready int, tune ...func(*consumer.Config)) {
	t.Helper()
	b.gate = make(chan struct{})
	var open sync.Once
	b.start(t, tune...)
	// Registered after start's, so it runs first: a test that fails before the gate
	// opens must not leave the consumer's shutdown waiting on its held workers.
	t.Cleanup(func() { open.Do(func() { close(b.gate) }) })
	testenv.Eventually(t, 20*time.Second, "both workers held and the prefetch pushed", func() bool {
		return b.waiting.Load() == 2 && testenv.QueueDepth(t, b.amqpURL, testenv.ExampleQueue) == ready
	})
	open.Do(func() { close(b.gate) })
}

// 200 messages wait in the queue when the consumer starts. While its two workers are
// busy the next batch grows, so the batch handler gets several messages per call, never
// more than BatchSize; every message is processed exactly once, by one handler or the
// other, and acked.
func TestMessagesAlreadyWaitingGoToTheBatchHandlerTogether(t *testing.T) {
	t.Parallel()
	b := newBatchRun(t)
	const n, batchSize = 200, 16
	envs, msgs := valid(t, n)
	sut.Publish(t, b.amqpURL, msgs...)
	// The default prefetch with a batch handler is 2×Concurrency×BatchSize = 64.
	b.holdUntilPrefetched(t, n-2*2*batchSize)

	testenv.Eventually(t, 60*time.Second, "every message processed and acked", func() bool {
		return b.metric(t, "bookstore_consumer_processed_total") == n
	})
	batches, failed, singles := b.snapshot()
	batched, largest := 0, 0
	for _, ids := range batches {
		batched += len(ids)
		largest = max(largest, len(ids))
	}
	if largest < 2 {
		t.Fatalf("the batch handler was never given more than one message (%d calls)", len(batches))
	}
	if largest > batchSize {
		t.Errorf("a batch of %d messages, above BatchSize %d", largest, batchSize)
	}
	if len(failed) != 0 {
		t.Errorf("%d batches failed, want none", len(failed))
	}
	handled := map[string]int{}
	for _, ids := range batches {
		for _, id := range ids {
			handled[id]++
		}
	}
	for id, calls := range singles {
		handled[id] += calls
	}
	for _, env := range envs {
		if handled[env.ID] != 1 {
			t.Errorf("message %s was given to the handlers %d times, want once", env.ID, handled[env.ID])
		}
	}
	b.processedOnce(t, envs)
	b.queuesEmpty(t, 0)
	if got := b.metric(t, "bookstore_consumer_batch_size_sum"); got != float64(batched) {
		t.Errorf("batch_size sum = %v, want the %d messages handed to the batch handler", got, batched)
	}
	if got := b.metric(t, "bookstore_consumer_batch_size_count"); got != float64(len(batches)) {
		t.Errorf("batch_size count = %v, want the %d batch calls", got, len(batches))
	}
	if got := b.metric(t, "bookstore_consumer_batch_fallbacks_total"); got != 0 {
		t.Errorf("batch_fallbacks = %v, want 0", got)
	}
	t.Logf("%d batch calls took %d messages (largest %d); %d went alone", len(batches), batched, largest, len(singles))
}

// A poison message in the middle of a batch, whether the consumer cannot decode it or the
// batch handler refuses it, fails that batch only as a batch: the poison is dead-lettered
// at its first delivery and counted, and its neighbours are processed, each exactly once,
// without a failure or a requeue.
func TestPoisonInABatchDoesNotFailItsNeighbours(t *testing.T) {
	undecodable := func(t *testing.T) broker.Message {
		return broker.Message{RoutingKey: testenv.ExampleType, Publishing: amqp.Publishing{
			Type: testenv.ExampleType, ContentType: event.ContentType, Body: []byte("not json at all")}}
	}
	refused := func(t *testing.T) broker.Message {
		_, m := message(t, map[string]any{"poison": true})
		return m
	}
	for _, c := range []struct {
		name   string
		poison func(*testing.T) broker.Message
		reason string
	}{
		{"undecodable", undecodable, event.ReasonNotJSON},
		{"refused by the handler", refused, event.ReasonInvalidData},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newBatchRun(t)
			const n = 40
			envs, msgs := valid(t, n)
			poison := c.poison(t)
			msgs = slices.Insert(msgs, n/2, poison)
			sut.Publish(t, b.amqpURL, msgs...)
			b.holdUntilPrefetched(t, 0) // 41 messages, a prefetch of 64

			testenv.Eventually(t, 30*time.Second, "the neighbours processed and the poison dead-lettered", func() bool {
				return b.metric(t, "bookstore_consumer_processed_total") == n &&
					testenv.QueueDepth(t, b.amqpURL, testenv.ExampleQueue+".dlq") == 1
			})
			b.processedOnce(t, envs)
			b.queuesEmpty(t, 1)
			dead := sut.Drain(t, b.amqpURL, testenv.ExampleQueue+".dlq", 100*time.Millisecond)
			if len(dead) != 1 || string(dead[0].Body) != string(poison.Publishing.Body) {
				t.Errorf("DLQ holds %d messages, want the poison alone", len(dead))
			}
			if got := b.metric(t, "bookstore_consumer_poison_total", `reason="`+c.reason+`"`); got != 1 {
				t.Errorf("poison{reason=%s} = %v, want 1", c.reason, got)
			}
			// No delivery came twice: the poison was dead-lettered at its first, and no
			// neighbour was failed.
			for _, name := range []string{"bookstore_consumer_transient_failures_total", "bookstore_consumer_redeliveries_total"} {
				if got := b.metric(t, name); got != 0 {
					t.Errorf("%s = %v, want 0: the poison or a neighbour went back to the queue", name, got)
				}
			}

			batches, failed, singles := b.snapshot()
			if c.reason == event.ReasonNotJSON {
				return // its batch never reaches the batch handler
			}
			// The batch handler refused the batch that held the poison; each message of
			// it then went to the single handler, once.
			if len(failed) != 1 || !slices.Contains(failed[0], poison.Publishing.MessageId) || len(failed[0]) < 2 {
				t.Fatalf("failed batch calls = %v, want one holding the poison %s and a neighbour", failed, poison.Publishing.MessageId)
			}
			for _, id := range failed[0] {
				if singles[id] != 1 {
					t.Errorf("message %s of the refused batch went to the single handler %d times, want once", id, singles[id])
				}
			}
			t.Logf("%d batch calls; the poison's batch held %d messages", len(batches), len(failed[0]))
		})
	}
}

// The batch handler fails once, after writing its batch's work inside its transaction.
// The consumer acks nothing of that batch and hands each of its messages to the single
// handler, which processes each exactly once; the fallback is counted, and it spends no
// delivery (nothing is requeued or counted as a failure).
func TestBatchHandlerErrorFallsBackToTheSingleHandlerForEveryMessageOfTheBatch(t *testing.T) {
	t.Parallel()
	b := newBatchRun(t)
	b.failBatches.Store(1)
	const n = 40
	envs, msgs := valid(t, n)
	sut.Publish(t, b.amqpURL, msgs...)
	b.holdUntilPrefetched(t, 0)

	testenv.Eventually(t, 30*time.Second, "every message processed and acked", func() bool {
		return b.metric(t, "bookstore_consumer_processed_total") == n
	})
	b.processedOnce(t, envs)
	b.queuesEmpty(t, 0)

	batches, failed, singles := b.snapshot()
	if len(failed) != 1 || len(failed[0]) < 2 {
		t.Fatalf("failed batch calls = %v, want one of several messages", failed)
	}
	for _, id := range failed[0] {
		if singles[id] != 1 {
			t.Errorf("message %s of the failed batch went to the single handler %d times, want once", id, singles[id])
		}
	}
	// The messages of the other batches never went alone.
	for _, ids := range batches {
		if slices.Equal(ids, failed[0]) {
			continue
		}
		for _, id := range ids {
			if singles[id] != 0 {
				t.Errorf("message %s of a committed batch also went to the single handler", id)
			}
		}
	}
	if got := b.metric(t, "bookstore_consumer_batch_fallbacks_total"); got != 1 {
		t.Errorf("batch_fallbacks = %v, want 1", got)
	}
	for _, name := range []string{"bookstore_consumer_transient_failures_total", "bookstore_consumer_redeliveries_total", "bookstore_consumer_poison_total"} {
		if got := b.metric(t, name); got != 0 {
			t.Errorf("%s = %v, want 0", name, got)
		}
	}
	if got := b.metric(t, "bookstore_consumer_batch_size_count"); got != float64(len(batches)-1) {
		t.Errorf("batch_size count = %v, want the %d committed batches", got, len(batches)-1)
	}
}

// Every message arrives twice, the copies right behind the originals, so batches hold
// copies of messages processed before and copies of their own neighbours. inbox.ProcessAll
// refuses such a batch whole (ErrNotAllNew), and one at a time the copies are acked as
// duplicates: each message's work is done exactly once.
func TestCopiesInABatchAreAckedAsDuplicatesAndProcessedOnce(t *testing.T) {
	t.Parallel()
	b := newBatchRun(t)
	const n = 24
	envs, msgs := valid(t, n)
	sut.Publish(t, b.amqpURL, slices.Concat(msgs, msgs)...)
	b.holdUntilPrefetched(t, 0)

	testenv.Eventually(t, 30*time.Second, "every copy acked", func() bool {
		return b.metric(t, "bookstore_consumer_processed_total")+b.metric(t, "bookstore_consumer_duplicates_total") == 2*n
	})
	b.processedOnce(t, envs)
	b.queuesEmpty(t, 0)
	if p, d := b.metric(t, "bookstore_consumer_processed_total"), b.metric(t, "bookstore_consumer_duplicates_total"); p != n || d != n {
		t.Errorf("processed %v, duplicates %v; want %d and %d", p, d, n, n)
	}
	_, failed, _ := b.snapshot()
	if len(failed) == 0 {
		t.Error("no batch held a copy: the test did not exercise inbox.ProcessAll's refusal")
	}
	if got := b.metric(t, "bookstore_consumer_batch_fallbacks_total"); got != float64(len(failed)) {
		t.Errorf("batch_fallbacks = %v, want the %d refused batches", got, len(failed))
	}
}

// With no Batch in Config, BatchSize means nothing: the consumer hands the handler one
// delivery at a time, and the broker may push it 2×Concurrency messages, not
// 2×Concurrency×BatchSize. Twenty messages wait; with both workers held the queue
// keeps all but four.
func TestWithoutABatchHandlerMessagesGoOneAtATimeWhateverTheBatchSize(t *testing.T) {
	t.Parallel()
	b := newBatchRun(t)
	const n = 20
	envs, msgs := valid(t, n)
	sut.Publish(t, b.amqpURL, msgs...)
	b.holdUntilPrefetched(t, n-4, func(cfg *consumer.Config) { cfg.Batch = nil })

	testenv.Eventually(t, 30*time.Second, "every message processed and acked", func() bool {
		return b.metric(t, "bookstore_consumer_processed_total") == n
	})
	b.processedOnce(t, envs)
	b.queuesEmpty(t, 0)
	_, _, singles := b.snapshot()
	for _, env := range envs {
		if singles[env.ID] != 1 {
			t.Errorf("message %s went to the handler %d times, want once", env.ID, singles[env.ID])
		}
	}
	if got := b.metric(t, "bookstore_consumer_batch_size_count"); got != 0 {
		t.Errorf("batch_size count = %v, want 0: there is no batch handler", got)
	}
}
