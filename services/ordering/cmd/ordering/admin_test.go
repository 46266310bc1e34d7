package main

import (
	"context"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// DATABASE_ADMIN_URL is empty unless given: the service then assumes its role and
// database exist and never connects as a superuser (least privilege by default).

// withoutAdmin is the service's environment with no DATABASE_ADMIN_URL at all.
func withoutAdmin(e env, extra ...string) map[string]string {
	vars := e.vars(extra...)
	delete(vars, "DATABASE_ADMIN_URL")
	return vars
}

func TestWithoutAnAdminURLAMissingDatabaseStopsTheStartNamingIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // names a role and database; nothing creates them
	u, _ := url.Parse(e.databaseURL)
	db := strings.TrimPrefix(u.Path, "/")
	vars := withoutAdmin(e, "HTTP_ADDR", testenv.FreeAddr(t))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, nil, func(k string) string { return vars[k] }, io.Discard)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("run = %v (context %v), want an error at start", err, ctx.Err())
	}
	msg := err.Error()
	t.Logf("run: %v", err)
	for _, want := range []string{`database "` + db + `"`, "DATABASE_URL", "DATABASE_ADMIN_URL"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if strings.Contains(msg, "connect admin") {
		t.Errorf("error %q is from a superuser connection, with none configured", msg)
	}
	// Nothing created the database behind the operator's back.
	conn, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil || exists {
		t.Errorf("database %s exists after a start with no admin URL (%v)", db, err)
	}
}

func TestWithoutAnAdminURLTheServiceStartsOnItsExistingDatabaseAsItsOwnRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	// What the init script or an operator does once, beforehand, with a superuser.
	if err := pgdb.Ensure(ctx, e.adminURL, e.databaseURL); err != nil {
		t.Fatal(err)
	}
	vars := withoutAdmin(e)
	base := sut.StartInProcess(t, run, vars)
	id := placeOrder(t, base)
	if status := orderStatus(t, base, id); status != "pending" && status != "confirmed" && status != "rejected" {
		t.Errorf("order %s: status %q", id, status)
	}
	// The operator's commands open the database the same way.
	if out, err := testenv.Command(t, run, vars, "outbox", "list-dead"); err != nil || !strings.Contains(out, "no dead outbox rows") {
		t.Errorf("outbox list-dead with no admin URL: %v\n%s", err, out)
	}

	// Every session on the service's database is the service's own role.
	u, _ := url.Parse(e.databaseURL)
	conn, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var sessions, others int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE usename <> $2)
		FROM pg_stat_activity WHERE datname = $1`, strings.TrimPrefix(u.Path, "/"), u.User.Username()).Scan(&sessions, &others); err != nil {
		t.Fatal(err)
	}
	if sessions == 0 || others != 0 {
		t.Errorf("%d session(s) on the service's database, %d of them not as its role %s", sessions, others, u.User.Username())
	}
}
