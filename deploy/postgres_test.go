package deploy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// composePostgres is the form of compose's Postgres image: postgres:<major>.<minor>-<debian>.
var composePostgres = regexp.MustCompile(`^postgres:(\d+)\.(\d+)-([a-z]+)$`)

// TestPostgres18RunsTheComposeInitScript initialises an empty Postgres of compose's
// version (18, from the Debian forky root) as the postgres image's entrypoint does on an
// empty volume: initdb with the superuser's password, passwords (scram-sha-256) over TCP,
// then every file of deploy/postgres/init through psql with ON_ERROR_STOP on a server
// reached by its socket. Then each role logs in over TCP with its compose password to its
// own database and to no other, and each service starts as compose starts it
// (pgdb.Ensure finds its database there) and creates a table.
func TestPostgres18RunsTheComposeInitScript(t *testing.T) {
	t.Parallel()
	img := loadCompose(t, nil, composeFile).Services["postgres"].Image
	v := composePostgres.FindStringSubmatch(img)
	if v == nil {
		t.Fatalf("compose's Postgres image %q is not postgres:<major>.<minor>-<debian>", img)
	}
	bin := "/usr/lib/postgresql/" + v[1] + "/bin"
	root := currentRoot(t, bin+"/postgres")

	out, err := chrootCommand(root, "", nil, bin+"/postgres", "--version").Output()
	if err != nil {
		t.Fatalf("postgres --version in %s: %v", root, err)
	}
	have := regexp.MustCompile(`\) (\d+)\.(\d+)`).FindStringSubmatch(string(out))
	if have == nil || have[1] != v[1] {
		t.Fatalf("%s runs %s, compose %s: the test would not run compose's major version", root, strings.TrimSpace(string(out)), img)
	}
	if have[2] != v[2] {
		t.Errorf("compose pins %s.%s, the tests run %s.%s (%s): pin the minor the tests run", v[1], v[2], have[1], have[2], strings.TrimSpace(string(out)))
	}

	dir, inside := rootTempDir(t, root)
	uid, gid := rootUser(t, root, "postgres")
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	const superPassword = "postgres" // compose's POSTGRES_PASSWORD
	if env(loadCompose(t, nil, composeFile).Services["postgres"], "POSTGRES_PASSWORD") != superPassword {
		t.Fatalf("compose's POSTGRES_PASSWORD is not %q", superPassword)
	}
	if err := os.WriteFile(filepath.Join(dir, "pwfile"), []byte(superPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(filepath.Join(dir, "pwfile"), uid, gid)
	initdb := chrootCommand(root, "postgres", nil, bin+"/initdb", "-D", inside+"/data", "--username=postgres",
		"--pwfile="+inside+"/pwfile", "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
	server := chrootCommand(root, "postgres", nil, bin+"/postgres", "-D", inside+"/data", "-p", port,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+inside, "-c", "max_connections=20")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	server.Stdout, server.Stderr = logFile, logFile
	server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = server.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-server.Process.Pid, syscall.SIGINT) // fast shutdown
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-server.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logFile.Close()
	})
	logs := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host := "127.0.0.1:" + port
	adminURL := "postgres://postgres:" + superPassword + "@" + host + "/postgres?sslmode=disable"
	for {
		conn, err := pgx.Connect(ctx, adminURL)
		if err == nil {
			conn.Close(ctx)
			break
		}
		select {
		case <-done:
			t.Fatalf("Postgres stopped:\n%s", logs())
		case <-ctx.Done():
			t.Fatalf("Postgres did not take the superuser's password over TCP: %v\n%s", err, logs())
		case <-time.After(200 * time.Millisecond):
		}
	}

	// The init scripts, as the entrypoint runs each *.sql in name order.
	scripts, _ := filepath.Glob(filepath.Join(repoRoot(t), "deploy/postgres/init/*"))
	if len(scripts) == 0 {
		t.Fatal("deploy/postgres/init holds no script")
	}
	for _, f := range scripts {
		if filepath.Ext(f) != ".sql" {
			t.Fatalf("%s: compose's init directory holds only .sql scripts, which this test runs as the image does", f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		psql := chrootCommand(root, "postgres", nil, bin+"/psql", "-v", "ON_ERROR_STOP=1", "--username", "postgres",
			"--no-password", "--no-psqlrc", "--dbname", "postgres", "-h", inside, "-p", port, "-f", inside+"/"+filepath.Base(f))
		if out, err := psql.CombinedOutput(); err != nil {
			t.Fatalf("%s on Postgres %s.%s: %v\n%s", filepath.Base(f), have[1], have[2], err, out)
		}
	}

	// What the script left, before any service starts: each role logs in to its own
	// database with its compose password, and to no other.
	roles := postgresInitRoles(t)
	compose := loadCompose(t, nil, composeFile)
	urls := map[string]*url.URL{}
	for _, c := range contractServices {
		u, err := url.Parse(env(compose.Services[c.Name], "DATABASE_URL"))
		if err != nil || roles[c.Name] == "" {
			t.Errorf("%s: DATABASE_URL %v, init script role %v", c.Name, err, roles[c.Name])
			continue
		}
		u.Host = host
		urls[c.Name] = u
	}
	for name, u := range urls {
		for other := range urls {
			to := *u
			to.Path = "/" + other
			conn, err := pgx.Connect(ctx, to.String())
			switch {
			case other == name && err != nil:
				t.Errorf("%s logs in to its database with its compose DATABASE_URL: %v", name, err)
			case other != name && err == nil:
				t.Errorf("%s logs in to %s's database", name, other)
			case other != name && !strings.Contains(err.Error(), "permission denied"):
				t.Errorf("%s logging in to %s's database: %v, want permission denied", name, other, err)
			}
			if err == nil {
				conn.Close(ctx)
			}
		}
	}
	// Then each service starts as compose starts it, and makes its tables.
	for name, u := range urls {
		if err := pgdb.Ensure(ctx, adminURL, u.String()); err != nil {
			t.Errorf("%s starts after the init script: %v", name, err)
			continue
		}
		conn, err := pgx.Connect(ctx, u.String())
		if err != nil {
			t.Errorf("%s connects with its compose DATABASE_URL: %v", name, err)
			continue
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE deploy_test (id int PRIMARY KEY)"); err != nil {
			t.Errorf("%s creates a table in its own database: %v", name, err)
		}
		conn.Close(ctx)
	}
	for _, line := range strings.Split(logs(), "\n") {
		if strings.Contains(line, "WARNING") {
			t.Errorf("Postgres %s.%s warns: %s", have[1], have[2], line)
		}
	}
}

// postgresVolume is where the postgres image of a major version declares its VOLUME, the
// directory its PGDATA is in or below: /var/lib/postgresql/data up to 17; from 18 on
// /var/lib/postgresql, with PGDATA /var/lib/postgresql/<major>/docker below it
// (docker-library/postgres#1259).
func postgresVolume(major int) string {
	if major < 18 {
		return "/var/lib/postgresql/data"
	}
	return "/var/lib/postgresql"
}

// Compose's named volume holds the database of compose's Postgres image: it is mounted
// where the image of that major version keeps its data, and PGDATA is left at the
// image's default. A volume at the pre-18 /var/lib/postgresql/data on an 18 image does
// not hold the database: the 18 entrypoint refuses to start with anything mounted there
// ("unused mount/volume"), and with PGDATA moved into it instead, a future major's
// pg_upgrade --link would cross a mount point.
func TestComposePostgresVolumeHoldsTheDatabase(t *testing.T) {
	t.Parallel()
	s := loadCompose(t, nil, composeFile).Services["postgres"]
	v := composePostgres.FindStringSubmatch(s.Image)
	if v == nil {
		t.Fatalf("compose's Postgres image %q is not postgres:<major>.<minor>-<debian>", s.Image)
	}
	major, _ := strconv.Atoi(v[1])
	volume := postgresVolume(major)
	if pgdata, ok := s.Environment["PGDATA"]; ok {
		t.Errorf("compose sets PGDATA=%v: leave it at the image's default, inside the volume", pgdata)
	}
	var named []string
	for _, m := range s.Volumes {
		if m.Type != types.VolumeTypeVolume {
			continue
		}
		named = append(named, m.Source+":"+m.Target)
		if m.Target != volume {
			t.Errorf("compose mounts volume %s at %s: Postgres %d keeps its data in %s", m.Source, m.Target, major, volume)
		}
		if !strings.Contains(m.Source, "postgres"+v[1]) {
			t.Errorf("compose's Postgres volume %s is not named for major version %s: an older major's volume would be mounted into %s", m.Source, v[1], s.Image)
		}
	}
	if len(named) != 1 {
		t.Errorf("compose's Postgres mounts named volumes %v, want one, at %s", named, volume)
	}
}

// rootUser returns the uid and gid of name in root's /etc/passwd, which need not match the
// machine's.
func rootUser(t testing.TB, root, name string) (int, int) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > 3 && fields[0] == name {
			uid, err1 := strconv.Atoi(fields[2])
			gid, err2 := strconv.Atoi(fields[3])
			if err := errors.Join(err1, err2); err != nil {
				t.Fatalf("%s/etc/passwd: %s: %v", root, name, err)
			}
			return uid, gid
		}
	}
	t.Fatalf("%s/etc/passwd has no user %s", root, name)
	return 0, 0
}
