package emails

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// The group commit against the real Postgres: the provider's Service on a database of
// its own, its round trips recorded. The first send of each test is held at its INSERT
// by a lock on the emails table, so that the others arrive while it commits, as they do
// under load, and the groups are known in advance.

// groupProvider is a Service under test with what the tests look at.
type groupProvider struct {
	*Service
	db   *pgxpool.Pool       // the test's own connections
	sent *testenv.RoundTrips // what the Service sent, a round trip an entry
}

// newProvider starts a Service of groupCommit on a fresh database, with one connection
// whose round trips are recorded.
func newProvider(t testing.TB, groupCommit int) groupProvider {
	t.Helper()
	admin, dbURL := testenv.Database(t, "emails")
	db, err := pgdb.Open(context.Background(), admin, dbURL, pgdb.Migrations{FS: schema.EmailProvider, VersionTable: "goose_emailprovider_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	pool, sent := testenv.TracedPool(t, dbURL)
	return groupProvider{Service: service(t, pool, groupCommit), db: db, sent: sent}
}

func service(t testing.TB, pool *pgxpool.Pool, groupCommit int) *Service {
	t.Helper()
	s, err := NewService(pool, NewFaults(FaultSettings{}, nil), nil, groupCommit,
		slog.New(slog.DiscardHandler), tracenoop.NewTracerProvider().Tracer(""), metricnoop.NewMeterProvider().Meter(""))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sendResult is one Send's outcome.
type sendResult struct {
	key  string
	sent Sent
	err  error
}

func email(subject string) Request {
	return Request{To: "ada@example.com", Subject: subject, Text: "Thank you for your order."}
}

// holdFirst sends key, and holds it at its INSERT until release: the committer is busy
// with it meanwhile. Its result comes on the returned channel.
func (p groupProvider) holdFirst(t *testing.T, key string) (release func(), first <-chan sendResult) {
	t.Helper()
	ctx := context.Background()
	lock, err := p.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "LOCK TABLE emails IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = lock.Rollback(ctx) }) }
	t.Cleanup(release)
	out := make(chan sendResult, 1)
	go func() {
		sent, err := p.Send(ctx, "bookstore", key, email("held"))
		out <- sendResult{key, sent, err}
	}()
	testenv.Eventually(t, 10*time.Second, "the first send to wait at its INSERT", func() bool {
		return testenv.Count(t, p.db, "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'emails'::regclass") == 1
	})
	return release, out
}

// sendAll sends each key with its request from a goroutine of its own; the results come
// on the returned channel, closed after the last.
func (p groupProvider) sendAll(ctx context.Context, keys []string, reqs []Request) <-chan sendResult {
	out := make(chan sendResult, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			sent, err := p.Send(ctx, "bookstore", key, reqs[i])
			out <- sendResult{key, sent, err}
		})
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

// waiting waits until n sends wait for the committer.
func (p groupProvider) waiting(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d sends waiting", n), func() bool {
		p.group.mu.Lock()
		defer p.group.mu.Unlock()
		return len(p.group.waiting) == n
	})
}

func count(rts []string, name string) int {
	n := 0
	for _, rt := range rts {
		if rt == name {
			n++
		}
	}
	return n
}

const groupLookup = "SELECT name, pg_try_advisory_xact_lock + GetEmailsByKeys"

// Sixty-three sends that arrive while one commits go in the next two transactions, 32
// and 31: each is one round trip for the locks and lookups and one INSERT, and every
// email is sent once.
func TestSendsArrivingDuringACommitShareTheNextTransactions(t *testing.T) {
	p := newProvider(t, 32)
	release, first := p.holdFirst(t, "first")
	keys := make([]string, 63)
	reqs := make([]Request, len(keys))
	for i := range keys {
		keys[i], reqs[i] = fmt.Sprintf("k%02d", i), email(fmt.Sprintf("email %d", i))
	}
	results := p.sendAll(context.Background(), keys, reqs)
	p.waiting(t, len(keys))
	release()

	bodies := map[string]bool{}
	for r := range results {
		if r.err != nil || r.sent.Replayed || !strings.Contains(string(r.sent.Body), `"idempotency_key":"`+r.key+`"`) {
			t.Errorf("%s: %+v %v, want it sent", r.key, r.sent, r.err)
		}
		bodies[string(r.sent.Body)] = true
	}
	if r := <-first; r.err != nil || r.sent.Replayed {
		t.Errorf("the first send: %+v %v", r.sent, r.err)
	}
	if len(bodies) != len(keys) {
		t.Errorf("%d distinct answers, want %d", len(bodies), len(keys))
	}
	if n := testenv.Count(t, p.db, "SELECT count(*) FROM emails WHERE deliveries = 1"); n != 64 {
		t.Errorf("%d emails delivered once, want 64", n)
	}
	group := []string{"begin", groupLookup, "InsertEmails", "commit"}
	want := append([]string{"begin", "SELECT pg_try_advisory_xact_lock + GetEmailByKey", "InsertEmail", "commit"}, slices.Concat(group, group)...)
	if got := p.sent.Reset(); !slices.Equal(got, want) {
		t.Errorf("round trips\n\t%s\nwant 64 emails in three transactions\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// With a group of at most one, every send is a transaction of its own.
func TestWithGroupCommitOneEverySendIsItsOwnTransaction(t *testing.T) {
	p := newProvider(t, 1)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := p.Send(context.Background(), "bookstore", fmt.Sprint(i), email("alone")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := count(p.sent.Reset(), "commit"); n != 8 {
		t.Errorf("%d commits, want 8", n)
	}
}

// Twenty-four sends of one key in one group: one sends, the others are told it is in
// flight, as concurrent copies are, and the key has one email.
func TestOneKeyManyTimesInAGroupIsSentOnce(t *testing.T) {
	p := newProvider(t, 32)
	release, first := p.holdFirst(t, "first")
	keys, reqs := make([]string, 24), make([]Request, 24)
	for i := range keys {
		keys[i], reqs[i] = "storm", email("storm")
	}
	results := p.sendAll(context.Background(), keys, reqs)
	p.waiting(t, len(keys))
	release()
	originals := 0
	for r := range results {
		switch {
		case r.err == nil && !r.sent.Replayed:
			originals++
		case r.err == nil, errors.Is(r.err, ErrKeyInFlight):
		default:
			t.Errorf("unexpected answer %+v %v", r.sent, r.err)
		}
	}
	<-first
	if originals != 1 {
		t.Errorf("%d sends sent the email, want exactly 1", originals)
	}
	if n := testenv.Count(t, p.db, "SELECT count(*) FROM emails WHERE idempotency_key = 'storm'"); n != 1 {
		t.Errorf("%d emails with the key, want 1", n)
	}
}

// A key reused with another body is refused in a group as alone, and the group's other
// emails are sent in the same transaction.
func TestAKeyReusedWithAnotherBodyIsRefusedInAGroupAndTheOthersSent(t *testing.T) {
	p := newProvider(t, 32)
	ctx := context.Background()
	if _, err := p.Send(ctx, "bookstore", "used", email("the first body")); err != nil {
		t.Fatal(err)
	}
	release, first := p.holdFirst(t, "first")
	p.sent.Reset()
	keys := []string{"a", "used", "b", "c"}
	reqs := []Request{email("a"), email("another body"), email("b"), email("c")}
	results := p.sendAll(ctx, keys, reqs)
	p.waiting(t, len(keys))
	release()
	for r := range results {
		switch {
		case r.key == "used" && !errors.Is(r.err, ErrKeyMismatch):
			t.Errorf("the reused key: %+v %v, want ErrKeyMismatch", r.sent, r.err)
		case r.key != "used" && (r.err != nil || r.sent.Replayed):
			t.Errorf("%s: %+v %v, want it sent", r.key, r.sent, r.err)
		}
	}
	<-first
	if got := p.sent.Reset(); count(got, groupLookup) != 1 || count(got, "commit") != 2 {
		t.Errorf("round trips\n\t%s\nwant the first send's transaction and one group's", strings.Join(got, "\n\t"))
	}
	if n := testenv.Count(t, p.db, "SELECT count(*) FROM emails WHERE subject = 'another body'"); n != 0 {
		t.Errorf("the other body was sent %d times", n)
	}
}

// A send whose caller gives up while it waits for a group returns at once and sends
// nothing; the group goes on without it.
func TestASendWhoseCallerGivesUpWhileWaitingLeavesUnsent(t *testing.T) {
	p := newProvider(t, 32)
	release, first := p.holdFirst(t, "first")
	ctx, giveUp := context.WithCancel(context.Background())
	quitter := p.sendAll(ctx, []string{"quitter"}, []Request{email("quitter")})
	stayer := p.sendAll(context.Background(), []string{"stayer"}, []Request{email("stayer")})
	p.waiting(t, 2)
	giveUp()
	select {
	case r := <-quitter:
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("the send given up: %+v %v, want context.Canceled", r.sent, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a send given up while waiting is still blocked")
	}
	p.waiting(t, 1)
	release()
	if r := <-stayer; r.err != nil {
		t.Errorf("the other waiting send: %v", r.err)
	}
	<-first
	if n := testenv.Count(t, p.db, "SELECT count(*) FROM emails WHERE idempotency_key = 'quitter'"); n != 0 {
		t.Errorf("the send given up was sent")
	}
}

// When a group's transaction fails, each of its emails is sent alone: here Postgres
// refuses any INSERT of more than one email.
func TestAGroupWhoseTransactionFailsSendsEachEmailAlone(t *testing.T) {
	p := newProvider(t, 32)
	ctx := context.Background()
	if _, err := p.db.Exec(ctx, `
		CREATE FUNCTION one_at_a_time() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT count(*) FROM inserted) > 1 THEN RAISE EXCEPTION 'one email at a time'; END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER one_at_a_time AFTER INSERT ON emails REFERENCING NEW TABLE AS inserted
			FOR EACH STATEMENT EXECUTE FUNCTION one_at_a_time()`); err != nil {
		t.Fatal(err)
	}
	release, first := p.holdFirst(t, "first")
	p.sent.Reset()
	keys := []string{"a", "b", "c", "d", "e"}
	reqs := make([]Request, len(keys))
	for i, k := range keys {
		reqs[i] = email(k)
	}
	results := p.sendAll(ctx, keys, reqs)
	p.waiting(t, len(keys))
	release()
	for r := range results {
		if r.err != nil || r.sent.Replayed {
			t.Errorf("%s: %+v %v, want it sent alone", r.key, r.sent, r.err)
		}
	}
	<-first
	got := p.sent.Reset()
	if count(got, "InsertEmails") != 1 || count(got, "rollback") != 1 || count(got, "InsertEmail") != 5 || count(got, "commit") != 6 {
		t.Errorf("round trips\n\t%s\nwant the group's rolled back, then six sends alone", strings.Join(got, "\n\t"))
	}
	if n := testenv.Count(t, p.db, "SELECT count(*) FROM emails"); n != 6 {
		t.Errorf("%d emails, want 6", n)
	}
}
