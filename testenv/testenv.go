// Package testenv gives each test its own Postgres database and RabbitMQ virtual host on
// the real servers of the machine, so tests run in parallel without seeing each other's
// rows or queues, and nothing is mocked.
//
// It also starts the service under test the two ways the tests need: in-process through
// its run function (StartInProcess), or as a real OS process that a failpoint can kill
// with SIGKILL and the test can restart (Build, StartProcess); and it reads what the
// service leaves behind: its /metrics (Metric) and its queues (Drain, QueueDepth).
//
// The helpers that need the system's topology or contracts are methods of System, which
// each test package builds once; the rest are functions. It is a module of its own, for
// tests and test harnesses (tools/chaos) only, so that no service binary links it.
//
// When a server is down a test is skipped on a developer's machine and fails in CI
// (CI=true): a green CI run must mean the tests talked to real services.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// servers are the servers the tests run on: the local ones unless the environment
// variables of the same name say otherwise. Read once, and only through the functions
// below.
var servers = struct{ adminURL, amqpBase, managementURL string }{
	adminURL:      env("TEST_DATABASE_ADMIN_URL", "postgres://postgres@localhost:5432/postgres?sslmode=disable"),
	amqpBase:      env("TEST_AMQP_URL", "amqp://guest:guest@localhost:5672/"),
	managementURL: env("TEST_RABBITMQ_MANAGEMENT_URL", "http://guest:guest@localhost:15672"),
}

// AdminURL is the Postgres URL of a superuser (TEST_DATABASE_ADMIN_URL): the admin URL a
// service under test creates its database and role with.
func AdminURL() string { return servers.adminURL }

// AMQPBase is the RabbitMQ URL without a vhost (TEST_AMQP_URL); VHost adds one per test.
func AMQPBase() string { return servers.amqpBase }

// ManagementURL is the RabbitMQ management API's URL with its credentials
// (TEST_RABBITMQ_MANAGEMENT_URL).
func ManagementURL() string { return servers.managementURL }

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Unavailable skips the test, or fails it in CI, where a missing service is a defect.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required in CI: %v", what, err)
	}
	t.Skipf("%s unavailable: %v", what, err)
}

// Name returns a short unique lower-case name with the given prefix.
func Name(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// PoolSize is the database pool (DATABASE_MAX_CONNS) of a service a test starts, unless
// the test sets one: pgxpool's old default. Dozens of services run at once against one
// server during make test; production's pool in each would run Postgres out of
// connections.
const PoolSize = 4

// Database names a fresh database and role for one test and returns the admin URL and
// the service's DATABASE_URL. The service creates both on start (pgdb.Ensure), exactly as
// in production; the test drops them when it ends.
func Database(t testing.TB, service string) (adminURL, databaseURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, servers.adminURL)
	if err != nil {
		Unavailable(t, "Postgres", err)
	}
	_ = conn.Close(ctx)

	name := Name("t_" + service)
	u, _ := url.Parse(servers.adminURL)
	u.User = url.User(name)
	u.Path = "/" + name
	t.Cleanup(func() { DropDatabase(t, name) })
	return servers.adminURL, u.String()
}

// DropDatabase removes a test database and its role, disconnecting whoever is left.
func DropDatabase(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, servers.adminURL)
	if err != nil {
		t.Logf("drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		t.Logf("drop database %s: %v", name, err)
	}
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+id); err != nil {
		t.Logf("drop role %s: %v", name, err)
	}
}

// Pool connects to the database at databaseURL, for a test to look at the rows a service
// left behind; the pool closes when the test ends.
func Pool(t testing.TB, databaseURL string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Count runs a query that selects one integer (a count(*), a column of one row) and
// returns it, failing the test if the query fails.
func Count(t testing.TB, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// VHost creates a fresh RabbitMQ virtual host for one test and returns its AMQP URL. A
// system's queues and exchanges have fixed names; a vhost per test keeps tests that
// declare them apart.
func VHost(t testing.TB) string {
	t.Helper()
	name := Name("t")
	m := broker.Management{URL: servers.managementURL}
	if err := m.CreateVHost(context.Background(), name, "guest"); err != nil {
		Unavailable(t, "RabbitMQ management API (rabbitmq-plugins enable rabbitmq_management)", err)
	}
	t.Cleanup(func() {
		if err := m.DeleteVHost(context.Background(), name); err != nil {
			t.Logf("%v", err)
		}
	})
	base, err := broker.ParseEndpoints(servers.amqpBase)
	if err != nil {
		t.Fatalf("TEST_AMQP_URL: %v", err)
	}
	amqpURL := base.WithVHost(name).String()
	conn, err := DialAMQP(t, amqpURL)
	if err != nil {
		Unavailable(t, "RabbitMQ", err)
	}
	_ = conn.Close()
	return amqpURL
}

// QueueDepth returns the number of ready messages in a queue of the vhost at amqpURL.
func QueueDepth(t testing.TB, amqpURL, queue string) int {
	t.Helper()
	conn, err := DialAMQP(t, amqpURL)
	if err != nil {
		t.Fatalf("queue depth: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("queue depth: %v", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("queue depth %s: %v", queue, err)
	}
	return q.Messages
}

// Eventually polls cond until it returns true or timeout passes, then fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address with a port that was free a moment ago, for a
// service under test to listen on.
//
// Between this call and the service's own listen, the port is free for anyone to take,
// and a process being built and started leaves that gap open for seconds: two tests once
// got the same port, and one test's requests reached the other's service. So each address
// is on a host of its own in 127.0.0.0/8 (all of it is loopback on Linux), where no other
// test asks for ports.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := LoopbackAddr()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return addr
}

// LoopbackAddr is FreeAddr for a harness that is not a test (tools/chaos): a free port on
// a random host of 127.0.0.0/8. On 127.0.0.1 a port given up a moment ago can be taken
// by any listener, or as the local port of any outgoing connection, of any test on the
// machine.
func LoopbackAddr() (string, error) {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	host := fmt.Sprintf("127.%d.%d.%d", 1+b[0]%254, b[1], 1+b[2]%254)
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// BrokerUser creates a broker user of its own for the test, with every permission on the
// vhost of amqpURL (one host, as VHost returns it), deletes it when the test ends, and
// returns amqpURL logged in as it: a publisher other than the one a consumer expects.
func BrokerUser(t testing.TB, amqpURL string) string {
	t.Helper()
	name := Name("user")
	const password = "test-password"
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatalf("BrokerUser: %v", err)
	}
	vhost := strings.TrimPrefix(u.Path, "/")
	m := broker.Management{URL: servers.managementURL}
	ctx := context.Background()
	if err := m.Do(ctx, http.MethodPut, "/api/users/"+url.PathEscape(name), `{"password":"`+password+`","tags":""}`, nil); err != nil {
		t.Fatalf("BrokerUser: %v", err)
	}
	t.Cleanup(func() { _ = m.Do(context.Background(), http.MethodDelete, "/api/users/"+url.PathEscape(name), "", nil) })
	perms := `{"configure":".*","write":".*","read":".*"}`
	if err := m.Do(ctx, http.MethodPut, "/api/permissions/"+url.PathEscape(vhost)+"/"+url.PathEscape(name), perms, nil); err != nil {
		t.Fatalf("BrokerUser: %v", err)
	}
	u.User = url.UserPassword(name, password)
	return u.String()
}

// Login is the broker user amqpURL logs in as (guest when it names none): the user-id of
// what a test publishes there, and the Producer of a consumer that takes it.
func Login(amqpURL string) string {
	e, err := broker.ParseEndpoints(amqpURL)
	if err != nil {
		return ""
	}
	return e.Login()
}
