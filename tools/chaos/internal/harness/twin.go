package harness

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitUp waits until p has been running for at least settled and answers /healthz, at
// most timeout.
func WaitUp(ctx context.Context, p *Process, settled, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.upFor() >= settled && status(ctx, "http://"+p.HTTPAddr+"/healthz") == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the live relay %s was not up for %v within %v", p.Name, settled, timeout)
		}
		if !Sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// HoldsRelayLock reports whether a session of db's database holds the advisory lock a
// relay takes for relayID on its LISTEN connection (TryRelayLock in
// sql/platform/queries/outbox.sql). Before a twin starts, that session can only be the
// live relay's. A relay loses the lock with that connection (an outage, a cut link) and
// takes it again only when it reconnects, after a backoff of up to its OutageMax.
func HoldsRelayLock(ctx context.Context, db *pgxpool.Pool, relayID string) (bool, error) {
	// A bigint advisory key is in pg_locks as classid (its high 32 bits) and objid (its
	// low 32 bits), with objsubid 1.
	var held bool
	err := db.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('outbox relay ' || $1::text, 0))`, relayID).Scan(&held)
	return held, err
}

// RelayLockTakenSince reports whether the advisory lock of relayID (as HoldsRelayLock)
// is held by a session that began at or after t: a relay that took its lock again on a
// new connection, not a session kept from before.
func RelayLockTakenSince(ctx context.Context, db *pgxpool.Pool, relayID string, t time.Time) (bool, error) {
	var taken bool
	err := db.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('outbox relay ' || $1::text, 0)
		  AND a.backend_start >= $2)`, relayID, t).Scan(&taken)
	return taken, err
}

// TwinProcess is a relay twin: one process, not supervised, stopped at the end of its fault.
type TwinProcess struct {
	Name     string
	httpAddr string
	cmd      *exec.Cmd
	done     chan struct{}
	Started  time.Time
	log      *os.File
}

// StartTwin starts a twin of p: its binary and environment on another HTTP address,
// `ordering relay` for ordering's API process, and without failpoints.
func StartTwin(sys *System, p *Process) (*TwinProcess, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := p.Args
	if p.Service == "ordering" {
		args = []string{"relay"}
	}
	name := p.Name + "-twin"
	log, err := os.OpenFile(filepath.Join(sys.dir, "logs", name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range p.Env {
		if !strings.HasPrefix(kv, "HTTP_ADDR=") {
			env = append(env, kv)
		}
	}
	// A small pool: the machine's Postgres is shared (100 connections), and the twin only
	// has to show whether it relays.
	env = append(env, "HTTP_ADDR="+addr, "BOOKSTORE_FAILPOINTS=", "DATABASE_MAX_CONNS=4")
	cmd := exec.Command(p.bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(log, "=== chaos %s: twin of %s started: %s %s\n", time.Now().Format(time.RFC3339Nano), p.Name, p.Service, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	t := &TwinProcess{Name: name, httpAddr: addr, cmd: cmd, done: make(chan struct{}), Started: time.Now(), log: log}
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(log, "=== chaos %s: twin exited: %v\n", time.Now().Format(time.RFC3339Nano), err)
		close(t.done)
	}()
	return t, nil
}

// WaitAlive waits until the twin answers /healthz (its /readyz may rightly say 503).
func (t *TwinProcess) WaitAlive(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-t.done:
			return fmt.Errorf("%s exited at start (see logs/%s.log)", t.Name, t.Name)
		default:
		}
		if status(ctx, "http://"+t.httpAddr+"/healthz") == http.StatusOK {
			return nil
		}
		if !Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s not alive after %v", t.Name, timeout)
}

// Published reads the twin's bookstore_outbox_published_total.
func (t *TwinProcess) Published(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.httpAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return sumMetric(bufio.NewScanner(resp.Body), "bookstore_outbox_published_total")
}

// sumMetric adds up every sample of a metric in Prometheus text format. A counter that
// was never incremented has no sample: 0.
func sumMetric(sc *bufio.Scanner, name string) (int, error) {
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	total := 0.0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // another metric whose name starts with this one
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		total += v
	}
	return int(total), sc.Err()
}

// ReadyStatus is the twin's /readyz status, or "no answer".
func (t *TwinProcess) ReadyStatus(ctx context.Context) string {
	if s := status(ctx, "http://"+t.httpAddr+"/readyz"); s != 0 {
		return strconv.Itoa(s)
	}
	return "no answer"
}

// Stop stops the twin: SIGTERM, SIGKILL after 5 s.
func (t *TwinProcess) Stop() {
	terminate(t.cmd, t.done, 5*time.Second)
	t.log.Close()
}

// status is the HTTP status of a GET, 0 when there is no answer.
func status(ctx context.Context, u string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// EnvValue returns the last value of name in env ("NAME=value" entries), "" if none.
func EnvValue(env []string, name string) string {
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}
