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

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/testenv"
)

// The tests of this file start the real ordering service, in-process through run() or as
// a real process where it has to die, against the real Postgres and RabbitMQ.

const dune = "018f2b1e-0000-7000-8000-000000000001"

// env is one ordering instance's configuration: its own database and vhost.
type env struct {
	adminURL, databaseURL, amqpURL string
}

func newEnv(t *testing.T) env {
	t.Helper()
	admin, db := testenv.Database(t, "ordering")
	return env{adminURL: admin, databaseURL: db, amqpURL: testenv.VHost(t)}
}

func (e env) vars(addr string, extra ...string) map[string]string {
	m := map[string]string{
		"DATABASE_URL":       e.databaseURL,
		"DATABASE_ADMIN_URL": e.adminURL,
		"AMQP_URL":           e.amqpURL,
		"HTTP_ADDR":          addr,
		"LOG_LEVEL":          "warn",
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

// binary builds the ordering command once per test run, for the tests that kill it.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "ordering-bin")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "ordering")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, b)
	}
	return out, nil
})

// process is the ordering service running as a real OS process.
type process struct {
	cmd  *exec.Cmd
	base string
	done chan error
	log  *bytes.Buffer
}

func startProcess(t *testing.T, e env, args []string, extra ...string) *process {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for k, v := range e.vars(addr, extra...) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{cmd: cmd, base: "http://" + addr, done: make(chan error, 1), log: &bytes.Buffer{}}
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

func postOrder(t *testing.T, base, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /orders: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func orderBody(email string, qty int) string {
	return fmt.Sprintf(`{"customer_email": %q, "lines": [{"book_id": %q, "quantity": %d}]}`, email, dune, qty)
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

// drain consumes every message now in queue, waiting up to quiet for more to arrive.
func drain(t *testing.T, amqpURL, queue string, quiet time.Duration) []amqp.Delivery {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.DeclareTopology(ch); err != nil {
		t.Fatal(err)
	}
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

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
