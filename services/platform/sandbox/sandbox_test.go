package sandbox_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
	"github.com/bookstore-go/bookstore/testenv"
)

func TestASandboxIsItsOwnDatabaseRoleAndVHostUntilClosed(t *testing.T) {
	ctx := context.Background()
	servers := sandbox.Servers{
		DatabaseAdminURL: testenv.AdminURL(),
		AMQPURL:          testenv.AMQPBase(),
		ManagementURL:    testenv.ManagementURL(),
	}
	box, err := sandbox.New(ctx, servers, "sandbox_test")
	if err != nil {
		testenv.Unavailable(t, "Postgres and RabbitMQ's management API", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			box.Close()
		}
	})

	var user, db string
	if err := box.Pool.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&user, &db); err != nil {
		t.Fatal(err)
	}
	if user != box.Name || db != box.Name {
		t.Fatalf("the pool is %s on %s, want the sandbox's own role and database %s", user, db, box.Name)
	}
	u, err := url.Parse(box.AMQPURL)
	if err != nil || u.Path != "/"+box.Name {
		t.Fatalf("AMQPURL %q, want the vhost /%s", box.AMQPURL, box.Name)
	}
	conn, err := amqp.Dial(box.AMQPURL)
	if err != nil {
		t.Fatalf("the sandbox's vhost takes no connection: %v", err)
	}
	_ = conn.Close()

	box.Close()
	closed = true

	admin, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var databases, roles int
	if err := admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_database WHERE datname = $1), (SELECT count(*) FROM pg_roles WHERE rolname = $1)", box.Name).Scan(&databases, &roles); err != nil {
		t.Fatal(err)
	}
	if databases != 0 || roles != 0 {
		t.Errorf("after Close: %d databases and %d roles named %s, want none", databases, roles, box.Name)
	}
	mgmt := broker.Management{URL: testenv.ManagementURL()}
	if err := mgmt.Do(ctx, "GET", "/api/vhosts/"+url.PathEscape(box.Name), "", nil); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("after Close: asking for vhost %s answered %v, want not found", box.Name, err)
	}
}

func TestServersComeFromTheEnvironmentAndDefaultToThisMachines(t *testing.T) {
	env := map[string]string{"DATABASE_ADMIN_URL": "postgres://postgres:postgres@localhost:5432/postgres"}
	got := sandbox.ServersFrom(func(name string) string { return env[name] })
	want := sandbox.Servers{
		DatabaseAdminURL: "postgres://postgres:postgres@localhost:5432/postgres",
		AMQPURL:          "amqp://guest:guest@localhost:5672/",
		ManagementURL:    "http://guest:guest@localhost:15672",
	}
	if got != want {
		t.Errorf("ServersFrom = %+v, want %+v", got, want)
	}
}
