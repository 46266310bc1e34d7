package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/testenv"
)

// The tests of this package start the real inventory service, in-process through run()
// or as a real process where it has to die, against the real Postgres and RabbitMQ, each
// test in a database and a virtual host of its own.

var dune = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")

// outcomesQueue is a queue the tests bind to every inventory event, to count what
// inventory announced: the contracts' queues are consumed by ordering and notification.
const outcomesQueue = "test.inventory-outcomes"

// env is one inventory instance's configuration: its own database and vhost.
type env struct {
	adminURL, databaseURL, amqpURL string
}

// newEnv makes the database and vhost, declares the contracts' topology in the vhost and
// binds outcomesQueue, so nothing inventory publishes is lost before the test reads it.
func newEnv(t *testing.T) env {
	t.Helper()
	admin, db := testenv.Database(t, "inventory")
	e := env{adminURL: admin, databaseURL: db, amqpURL: testenv.VHost(t)}
	ch := channel(t, e.amqpURL)
	if err := broker.DeclareTopology(ch); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(outcomesQueue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(outcomesQueue, "inventory.#", broker.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e env) vars(addr string, extra ...string) map[string]string {
	m := map[string]string{
		"DATABASE_URL":         e.databaseURL,
		"DATABASE_ADMIN_URL":   e.adminURL,
		"AMQP_URL":             e.amqpURL,
		"HTTP_ADDR":            addr,
		"LOG_LEVEL":            "warn",
		"CONSUMER_CONCURRENCY": "2",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// startInProcess runs the service through run() until the test ends and returns its
// base URL once /readyz answers 200.
func startInProcess(t *testing.T, e env, extra ...string) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	vars := e.vars(addr, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return vars[k] }, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned: %v", err)
		}
	})
	base := "http://" + addr
	waitReady(t, base, done)
	return base
}

func waitReady(t *testing.T, base string, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("service exited before it was ready: %v", err)
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never became ready", base)
}

// binary builds the inventory command once per test run, for the tests that kill it.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "inventory-bin")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "inventory")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, b)
	}
	return out, nil
})

// process is the inventory service running as a real OS process.
type process struct {
	cmd  *exec.Cmd
	base string
	done chan error
	log  *syncBuffer
}

func startProcess(t *testing.T, e env, extra ...string) *process {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = os.Environ()
	for k, v := range e.vars(addr, extra...) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{cmd: cmd, base: "http://" + addr, done: make(chan error, 1), log: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	waitReady(t, p.base, p.done)
	return p
}

// waitKilled waits for the process to die of SIGKILL, as the crash failpoint does.
func (p *process) waitKilled(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for the cleanup
		if !strings.Contains(fmt.Sprint(err), "signal: killed") {
			t.Fatalf("process ended with %v, want killed by SIGKILL\n%s", err, p.log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("process did not crash\n%s", p.log)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func channel(t *testing.T, amqpURL string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// orderPlaced is the OrderPlaced event of a new order, as ordering's outbox writes it.
func orderPlaced(t *testing.T, lines ...event.Line) event.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	env, err := event.New("bookstore/ordering", event.OrderPlaced, id.String(), 1, event.OrderPlacedData{
		OrderID: id, CustomerEmail: "ada@example.com", Lines: lines, PlacedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// publish sends body to the events exchange under routingKey, as ordering's relay does,
// and waits for the broker's confirm.
func publish(t *testing.T, amqpURL, routingKey, messageID string, body []byte) {
	t.Helper()
	ch := channel(t, amqpURL)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), broker.Exchange, routingKey, true, false, amqp.Publishing{
		MessageId: messageID, Type: routingKey, ContentType: event.ContentType, AppId: "ordering",
		DeliveryMode: amqp.Persistent, Body: body,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
		t.Fatalf("publish %s: acked %v, %v", messageID, ok, err)
	}
}

func publishEvent(t *testing.T, amqpURL string, env event.Envelope) {
	t.Helper()
	publish(t, amqpURL, env.Type, env.ID, marshal(t, env))
}

// drain takes every message now in queue, waiting up to quiet for more to arrive.
func drain(t *testing.T, amqpURL, queue string, quiet time.Duration) []amqp.Delivery {
	t.Helper()
	ch := channel(t, amqpURL)
	var out []amqp.Delivery
	deadline := time.Now().Add(quiet)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		out = append(out, d)
		deadline = time.Now().Add(quiet)
	}
	return out
}

// distinctIDs counts the distinct message ids of msgs: a relay may publish an event twice
// after a crash, always with the same id.
func distinctIDs(msgs []amqp.Delivery) map[string]amqp.Delivery {
	out := map[string]amqp.Delivery{}
	for _, m := range msgs {
		out[m.MessageId] = m
	}
	return out
}

func pool(t *testing.T, databaseURL string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func reserved(t *testing.T, db *pgxpool.Pool, book uuid.UUID) int {
	t.Helper()
	return count(t, db, "SELECT reserved FROM books WHERE id = $1", book)
}

func request(t *testing.T, method, url, body string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}
