// Package pgdb gives each service its own Postgres database, owned by its own role, with
// the schema brought up to date before the service takes any traffic.
//
// It closes the "init script never ran" failure of container setups: Postgres init
// scripts run only on an empty volume, so every service also creates its role and
// database itself, idempotently, on every start.
package pgdb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// Migrations is one set of goose migrations and the table that records how far it got.
// The platform's tables (outbox, inbox) and a service's own are separate sets, each with
// its own version table, so neither numbering has to know the other.
type Migrations struct {
	FS           fs.FS
	VersionTable string
}

// Ensure creates the role and database named in databaseURL if they are missing, using
// adminURL (a superuser). The role owns the database and PUBLIC may not connect to it,
// so no service can read another's tables; the role carries RoleSettings. Safe to run
// concurrently and on every start.
func Ensure(ctx context.Context, adminURL, databaseURL string) error {
	target, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("ensure database: parse DATABASE_URL: %w", err)
	}
	role, db := target.User, target.Database
	if role == "" || db == "" {
		return errors.New("ensure database: DATABASE_URL must name a user and a database")
	}
	adminCfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return fmt.Errorf("ensure database: parse DATABASE_ADMIN_URL: %w", err)
	}
	boundConnect(adminURL, &adminCfg.Config, false)
	admin, err := pgx.ConnectConfig(ctx, adminCfg)
	if err != nil {
		return fmt.Errorf("ensure database: connect admin: %w", err)
	}
	defer admin.Close(ctx)
	// Two instances starting at once would otherwise race on the catalog ("tuple
	// concurrently updated" on the REVOKE); a session advisory lock per database makes
	// them take turns.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended('bookstore/ensure:' || $1, 0))", db); err != nil {
		return fmt.Errorf("ensure database: lock: %w", err)
	}

	// A password in DATABASE_URL (docker compose) is set on the role; locally trust auth
	// needs none. pgx's parse, not net/url's: it takes every form DATABASE_URL may have,
	// a multi-host URL with an IPv6 host among them.
	pw := target.Password
	createRole := "CREATE ROLE " + pgx.Identifier{role}.Sanitize() + " LOGIN"
	if pw != "" {
		createRole += " PASSWORD " + quoteLiteral(pw)
	}
	if err := ignoreDuplicate(exec(ctx, admin, createRole)); err != nil {
		return fmt.Errorf("ensure database: create role %s: %w", role, err)
	}
	createDB := "CREATE DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER " + pgx.Identifier{role}.Sanitize()
	if err := ignoreDuplicate(exec(ctx, admin, createDB)); err != nil {
		return fmt.Errorf("ensure database: create database %s: %w", db, err)
	}
	if _, err := admin.Exec(ctx, "REVOKE ALL ON DATABASE "+pgx.Identifier{db}.Sanitize()+" FROM PUBLIC"); err != nil {
		return fmt.Errorf("ensure database: revoke public on %s: %w", db, err)
	}
	// On every start, not only on creation: a role made before the bounds existed, or
	// changed by hand, gets them back. Not on a superuser named as the service's role (a
	// development setup): the bounds would reach every administrator's session too.
	var super bool
	if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&super); err != nil {
		return fmt.Errorf("ensure database: role %s: %w", role, err)
	}
	for _, name := range slices.Sorted(maps.Keys(RoleSettings)) {
		if super {
			break
		}
		set := "ALTER ROLE " + pgx.Identifier{role}.Sanitize() + " SET " + name + " = " + quoteLiteral(RoleSettings[name])
		if _, err := admin.Exec(ctx, set); err != nil {
			return fmt.Errorf("ensure database: bound role %s: %w", role, err)
		}
	}
	return nil
}

// exec runs a statement that has no IF NOT EXISTS form.
func exec(ctx context.Context, conn *pgx.Conn, sql string) error {
	_, err := conn.Exec(ctx, sql)
	return err
}

// ignoreDuplicate turns "already exists" into success. Checking first and creating second
// would race with a second instance starting at the same moment; asking and forgiving
// cannot.
func ignoreDuplicate(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42710", "42P04", "23505": // duplicate_object, duplicate_database, unique_violation (catalog race)
			return nil
		}
	}
	return err
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Migrate applies every pending migration of each set, in order, on connections of
// pool's configuration without a statement timeout: a migration may rewrite a table for
// longer than any statement of traffic may take, and one cancelled half-way through a
// start would stop the service from starting at all.
func Migrate(ctx context.Context, pool *pgxpool.Pool, sets ...Migrations) error {
	cfg := pool.Config()
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "0"
	unbounded, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer unbounded.Close()
	db := stdlib.OpenDBFromPool(unbounded)
	defer db.Close()
	for _, set := range sets {
		// The session locker makes a second instance starting at the same moment wait for
		// the first one's migrations instead of running them again.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(set.VersionTable)), lock.WithLockTimeout(1, 120))
		if err != nil {
			return fmt.Errorf("migrate %s: %w", set.VersionTable, err)
		}
		p, err := goose.NewProvider("", db, set.FS,
			goose.WithStore(mustStore(set.VersionTable)),
			goose.WithDisableGlobalRegistry(true),
			goose.WithSessionLocker(locker))
		if err != nil {
			return fmt.Errorf("migrate %s: %w", set.VersionTable, err)
		}
		if _, err := p.Up(ctx); err != nil {
			return fmt.Errorf("migrate %s: %w", set.VersionTable, err)
		}
	}
	return nil
}

// lockID derives a migration lock per version table, so the platform's and the service's
// migrations do not wait on one another's lock id.
func lockID(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("bookstore/migrate:" + table))
	return int64(h.Sum64() >> 1)
}

func mustStore(table string) database.Store {
	s, err := database.NewStore(database.DialectPostgres, table)
	if err != nil {
		panic(err) // only for an empty table name: a programming error
	}
	return s
}

// Open ensures the database exists (when adminURL is set; when it is empty, nothing
// connects as a superuser and the role and database must exist), connects as the service's own
// role, and migrates. It returns a pool ready for traffic, of the size the URL's
// pool_max_conns asks for (config.Common.PoolURL sets it from DATABASE_MAX_CONNS).
func Open(ctx context.Context, adminURL, databaseURL string, sets ...Migrations) (*pgxpool.Pool, error) {
	if adminURL != "" {
		if err := Ensure(ctx, adminURL, databaseURL); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	boundConnect(databaseURL, &cfg.ConnConfig.Config, true)
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		RegisterTypes(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if adminURL == "" {
		// Nothing created it: say which database and role were assumed to exist, before
		// the migrations fail on the same connection with less to go on.
		if err := pool.Ping(ctx); err != nil {
			conn := pool.Config().ConnConfig
			pool.Close()
			return nil, fmt.Errorf("open database %q as role %q (DATABASE_URL): %w; with DATABASE_ADMIN_URL empty it is assumed to exist: create the role and database, or set DATABASE_ADMIN_URL to a superuser connection that creates them", conn.Database, conn.User, err)
		}
	}
	if err := Migrate(ctx, pool, sets...); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// ConnectTimeout bounds each host's connection attempt (TCP, TLS, startup and, with
// target_session_attrs, the check of the server's role) when the URL sets no
// connect_timeout of its own. pgx has no default: a host that drops packets (a node
// partitioned away, a primary's address with no machine behind it after a failover)
// would hang every new connection until the kernel gives up minutes later, instead of
// moving on to the next host of a multi-host URL. Every connection a service opens, the
// pool's, its relay's listener (which copies the pool's config) and the admin one,
// gets it here.
const ConnectTimeout = 5 * time.Second

// Transient reports whether err is a failure that the same statement may not meet again:
// a serialization failure or a deadlock, which Postgres resolves by aborting one of the
// transactions involved, a statement cancelled at its timeout (TimedOut), or a connection that broke, before anything was sent or in the
// middle of a statement (the server died, or a failover moved the primary elsewhere). A
// retry of the whole transaction, on a new connection, is the remedy for each, and the
// message it served is not at fault. A connection lost in the middle of a COMMIT leaves
// its outcome unknown: the retry may repeat committed work, which the caller's inbox
// (or an equally idempotent write) must absorb.
func Transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// serialization_failure, deadlock_detected, query_canceled (TimedOut)
		return pgErr.Code == "40001" || pgErr.Code == "40P01" || pgErr.Code == "57014"
	}
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || pgconn.SafeToRetry(err) || LostConnection(err)
}

// LostConnection reports whether err is the connection breaking under a statement: the
// server hung up (EOF) or ended the session (57P01-57P03: terminated by an administrator,
// a server shutting down or crashing), the network failed (a reset, a refused write), or
// pgx had closed the connection on such a failure earlier in the same operation
// (ErrConnClosed). pgx closes such a connection and a pool does not hand it out again.
// When it broke during a COMMIT, whether the transaction committed is unknown.
func LostConnection(err error) bool {
	var netErr net.Error
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		(errors.As(err, &netErr) && !netErr.Timeout())
}

// TimedOut reports whether err is a statement the server cancelled (57014,
// query_canceled): its statement timeout ran out (StatementTimeout), or the client
// cancelled it. The transaction it was in is rolled back whole, and the same work may
// finish on another try once what it waited on (a lock, a burst of load) is gone: neither
// an outage of the database nor the work's own fault.
func TimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// Refused reports whether err is the database refusing any work of this kind, whatever
// the message: a privilege the role lacks (42501), a table, column or function that does
// not exist (42P01, 42703, 42883: a migration that has not run), a read-only transaction
// (25006: a standby after a failover), or a server shutting down or starting
// (57P01-57P03). A ping succeeds through each of them, so a caller that asks only
// whether the database answers takes them for the message's fault; they are outages of
// the database, and the remedy is to wait for it, not to retry the message elsewhere.
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42501", "42P01", "42703", "42883", "25006", "57P01", "57P02", "57P03":
		return true
	}
	return false
}

// DeleteInBatches calls deleteBatch, each call in a transaction of its own, until a call
// deletes fewer than batch rows, and returns how many it deleted in all. Small batches
// keep each statement's locks and WAL short beside live traffic. Each transaction first
// takes the advisory lock lockKey without waiting, and deletes nothing if another
// instance holds it: several instances of a service then do not fight over the same rows.
func DeleteInBatches(ctx context.Context, pool *pgxpool.Pool, lockKey int64, batch int, deleteBatch func(tx pgx.Tx, batch int) (int64, error)) (int64, error) {
	var total int64
	for {
		var n int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var locked bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", lockKey).Scan(&locked); err != nil || !locked {
				return err
			}
			var err error
			n, err = deleteBatch(tx, batch)
			return err
		})
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}
