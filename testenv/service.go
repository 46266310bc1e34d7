package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// ReadyTimeout bounds how long a service under test may take to answer /readyz with 200:
// it creates its database, migrates it and declares its queues first, and the machine
// runs other engineers' tests at the same time.
const ReadyTimeout = 60 * time.Second

// RunFunc is the run function of every service's main package: the whole service, which
// ends when ctx does.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// StartInProcess runs a service through its run function until the test ends, with env
// as its whole environment, and returns its base URL once /readyz answers 200. HTTP_ADDR
// is set to a free loopback port unless env names one. The test fails if run returns an
// error, whether before the service was ready or at the end.
func (s System) StartInProcess(t testing.TB, run RunFunc, env map[string]string) (baseURL string) {
	t.Helper()
	vars := maps.Clone(env)
	if vars == nil {
		vars = map[string]string{}
	}
	if vars["HTTP_ADDR"] == "" {
		vars["HTTP_ADDR"] = FreeAddr(t)
	}
	if vars["DATABASE_MAX_CONNS"] == "" {
		vars["DATABASE_MAX_CONNS"] = strconv.Itoa(PoolSize)
	}
	if producer, ok := oneUserProducer(vars); ok {
		vars["CONSUMER_PRODUCER"] = producer
	}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var runErr error
	go func() {
		defer close(exited)
		runErr = run(ctx, nil, func(k string) string { return vars[k] }, io.Discard)
	}()
	// Registered before waiting, so a service that dies before it is ready still has its
	// error reported.
	t.Cleanup(func() {
		cancel()
		<-exited
		if runErr != nil {
			t.Errorf("run returned: %v", runErr)
		}
	})
	baseURL = "http://" + vars["HTTP_ADDR"]
	// Every exchange with the service is checked against its HTTP contract (the run
	// function does not say which service it is: the contract finds it by path).
	s.watch(t, baseURL, "")
	WaitReady(t, baseURL, exited)
	return baseURL
}

// WaitReady polls base's /readyz until it answers 200, and fails the test if exited is
// closed first (the service ended) or ReadyTimeout passes.
func WaitReady(t testing.TB, base string, exited <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if err := PollReady(ctx, base, exited); err != nil {
		t.Fatal(err)
	}
}

// PollReady is WaitReady for a harness that is not a test (tools/chaos): it polls base's
// /readyz until it answers 200, and returns an error if exited is closed first (nil
// waits for ctx alone) or ctx ends. Each request is bounded, so a service that accepts
// the connection and never answers does not hold the wait past ctx.
func PollReady(ctx context.Context, base string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		select {
		case <-exited:
			return fmt.Errorf("service at %s exited before it was ready", base)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s %s", resp.Status, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("service at %s never became ready (last answer: %s)", base, last)
		case <-exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// oneUserProducer returns the CONSUMER_PRODUCER of a service under test whose AMQP_URL
// logs in as the tests' own broker user (TEST_AMQP_URL's, guest): the tests log every
// service in as that one user, so each publishes as it, and each consumer takes its
// events from it. A service logged in as its own user (the contract's, as the deploy
// tests do it) or given a producer keeps its own.
func oneUserProducer(env map[string]string) (string, bool) {
	u := env["AMQP_URL"]
	if u == "" || env["CONSUMER_PRODUCER"] != "" || Login(u) != Login(servers.amqpBase) {
		return "", false
	}
	return Login(u), true
}
