package experiments

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
)

// Migrations are the schema of notification's database, as the service applies it.
var Migrations = []pgdb.Migrations{
	{FS: schema.Platform, VersionTable: "goose_platform_version"},
	{FS: schema.Notification, VersionTable: "goose_notification_version"},
}

// NewSandbox makes a Lab of its own on the Postgres at adminURL (a superuser connection):
// a fresh database and role, migrated as notification's own would be, and an email
// provider in-process, so the experiment touches neither the running system's
// notification database nor its provider. close drops the database and stops the
// provider.
func NewSandbox(ctx context.Context, adminURL string, tel *telemetry.Telemetry) (lab *Lab, close func(), err error) {
	name, err := sandboxName()
	if err != nil {
		return nil, nil, err
	}
	dbURL, err := url.Parse(adminURL)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: DATABASE_ADMIN_URL: %w", err)
	}
	dbURL.User, dbURL.Path = url.User(name), "/"+name
	var cleanups []func()
	close = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			close()
		}
	}()

	cleanups = append(cleanups, func() { dropDatabase(adminURL, name) })
	pool, err := pgdb.Open(ctx, adminURL, dbURL.String(), Migrations...)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox database: %w", err)
	}
	cleanups = append(cleanups, pool.Close)
	p, stop, err := StartProvider()
	if err != nil {
		return nil, nil, err
	}
	cleanups = append(cleanups, stop)
	return &Lab{Pool: pool, Provider: p, Tel: tel}, close, nil
}

func sandboxName() (string, error) {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "notification_demo_" + hex.EncodeToString(b), nil
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
