// Package sandbox makes the share of the servers a demonstration runs in: a database and
// role of its own, migrated, and a RabbitMQ virtual host of its own, all removed by Close.
// `make demo` runs every experiment in one, so a demo never touches the running system's
// databases or queues, and two demos side by side never see each other.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// Servers are the Postgres and RabbitMQ a sandbox is made on.
type Servers struct {
	DatabaseAdminURL string // a superuser connection, which creates and drops the database
	AMQPURL          string // the broker; the sandbox's vhost replaces its path. Empty: no vhost
	ManagementURL    string // RabbitMQ's management API, which creates and deletes the vhost
}

// Sandbox is one demonstration's database, role and virtual host.
type Sandbox struct {
	Name    string        // prefix_<10 hex digits>: the database's, the role's and the vhost's name
	Pool    *pgxpool.Pool // a pool on the migrated database, as the sandbox's own role
	AMQPURL string        // the broker URL with the sandbox's vhost; empty without Servers.AMQPURL

	cleanups []func()
}

// New makes a sandbox named prefix plus a random suffix on servers, its database migrated
// with migrations. On an error it has already removed what it made.
func New(ctx context.Context, servers Servers, prefix string, migrations ...pgdb.Migrations) (s *Sandbox, err error) {
	suffix := make([]byte, 5)
	if _, err := rand.Read(suffix); err != nil {
		return nil, err
	}
	s = &Sandbox{Name: prefix + "_" + hex.EncodeToString(suffix)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	dbURL, err := url.Parse(servers.DatabaseAdminURL)
	if err != nil {
		return nil, fmt.Errorf("sandbox: DATABASE_ADMIN_URL: %w", err)
	}
	// The role gets a password (pgdb.Open sets the URL's on it): a server that checks
	// passwords over TCP, as docker compose's Postgres does, refuses a role without one.
	// The sandbox's name will do: the role lives as long as the demo.
	dbURL.User, dbURL.Path = url.UserPassword(s.Name, s.Name), "/"+s.Name
	s.cleanups = append(s.cleanups, func() { dropDatabase(servers.DatabaseAdminURL, s.Name) })
	if s.Pool, err = pgdb.Open(ctx, servers.DatabaseAdminURL, dbURL.String(), migrations...); err != nil {
		return nil, fmt.Errorf("sandbox database: %w", err)
	}
	s.cleanups = append(s.cleanups, s.Pool.Close)

	if servers.AMQPURL == "" {
		return s, nil
	}
	amqpURL, err := broker.ParseEndpoints(servers.AMQPURL)
	if err != nil {
		return nil, fmt.Errorf("sandbox: AMQP_URL: %w", err)
	}
	mgmt := broker.Management{URL: servers.ManagementURL}
	if err := mgmt.CreateVHost(ctx, s.Name, amqpURL.User()); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	s.cleanups = append(s.cleanups, func() { _ = mgmt.DeleteVHost(context.Background(), s.Name) })
	s.AMQPURL = amqpURL.WithVHost(s.Name).String()
	return s, nil
}

// Close removes the vhost, the database and the role, the last made first.
func (s *Sandbox) Close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
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
