package experiments

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Servers are the Postgres and RabbitMQ a sandbox is made on.
type Servers struct {
	DatabaseAdminURL string // a superuser connection, which creates and drops the database
	AMQPURL          string // the broker; the sandbox's vhost replaces its path
	ManagementURL    string // RabbitMQ's management API, which creates and deletes the vhost
}

// NewSandbox makes a Lab of its own on servers: a fresh database and role, migrated and
// seeded as inventory's own would be, and a fresh virtual host, so the experiments touch
// neither the running system's inventory database nor its queues. close drops both.
func NewSandbox(ctx context.Context, servers Servers, tel *telemetry.Telemetry) (lab *Lab, close func(), err error) {
	name, err := sandboxName()
	if err != nil {
		return nil, nil, err
	}
	dbURL, err := url.Parse(servers.DatabaseAdminURL)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: DATABASE_ADMIN_URL: %w", err)
	}
	// The role gets a password (pgdb.Ensure sets the URL's on it): a server that checks
	// passwords over TCP, as docker compose's Postgres does, refuses a role without one.
	// The sandbox's name will do: the role lives as long as the demo.
	dbURL.User, dbURL.Path = url.UserPassword(name, name), "/"+name
	var cleanups []func()
	closeAll := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	// closeAll, not close: a failing return sets the result close to nil before this runs.
	defer func() {
		if err != nil {
			closeAll()
		}
	}()

	cleanups = append(cleanups, func() { dropDatabase(servers.DatabaseAdminURL, name) })
	pool, err := pgdb.Open(ctx, servers.DatabaseAdminURL, dbURL.String(), stock.Migrations...)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox database: %w", err)
	}
	cleanups = append(cleanups, pool.Close)

	mgmt := broker.Management{URL: servers.ManagementURL}
	amqpURL, err := url.Parse(servers.AMQPURL)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: AMQP_URL: %w", err)
	}
	if err := mgmt.CreateVHost(ctx, name, amqpURL.User.Username()); err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	cleanups = append(cleanups, func() { _ = mgmt.DeleteVHost(context.Background(), name) })
	amqpURL.Path = "/" + name
	return &Lab{Pool: pool, AMQPURL: amqpURL.String(), Tel: tel}, closeAll, nil
}

func sandboxName() (string, error) {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "inventory_demo_" + hex.EncodeToString(b), nil
}

func dropDatabase(adminURL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)")
	_, _ = conn.Exec(ctx, "DROP ROLE IF EXISTS "+id)
}
