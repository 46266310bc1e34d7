package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/testenv"
)

// PostgresBin is where this machine's Postgres 15 binaries are (Debian's layout).
const PostgresBin = "/usr/lib/postgresql/15/bin"

// PostgresTimeout bounds each step of StartPostgres, Promote and Rejoin.
const PostgresTimeout = 2 * time.Minute

// synchronous is synchronous_standby_names while the primary has its standby: a commit
// returns once one standby has flushed it, as CloudNativePG's
// `synchronous: {method: any, number: 1}` configures it.
const synchronous = "ANY 1 (*)"

// Postgres is a Postgres 15 primary with one streaming standby on this machine, as one
// CloudNativePG cluster of the production overlay runs them: synchronous replication to
// the standby (a commit returns once the standby has flushed it), trust authentication
// on loopback only, each node on a loopback address and port of its own, run as the
// postgres OS user.
//
// The harness plays the operator's part. Failover kills the primary, promotes the
// standby and brings the old primary back as the new primary's standby (a fresh
// pg_basebackup, as the operator re-clones a lost instance). Between the promotion and
// the rejoin the new primary has no standby; like the overlay's clusters
// (dataDurability: preferred) it then commits alone, so Promote clears
// synchronous_standby_names and Rejoin sets it again. A standby that is merely
// unreachable (PauseStandby, a partition) is not dropped: commits wait for it, as they
// would for the seconds an operator takes to notice.
//
// URL names both nodes with target_session_attrs=read-write, so a client finds whichever
// is the primary now without being told.
//
// StartPostgresAlone starts a Postgres of one server instead, with the server's defaults:
// none of the above but its URL and KillPrimary.
type Postgres struct {
	dir  string
	name string
	cred *syscall.Credential

	mu      sync.Mutex
	nodes   []*pgNode // two, or one for StartPostgresAlone
	primary int
	paused  bool
}

// pgNode is one Postgres server of the pair.
type pgNode struct {
	dir  string // data directory and socket directory live in it
	host string
	port int
	proc *proc // nil while down
}

func (n *pgNode) data() string { return filepath.Join(n.dir, "data") }
func (n *pgNode) log() string  { return filepath.Join(n.dir, "postgres.log") }

// FailoverTimes are how long each step of a Failover took.
type FailoverTimes struct {
	Kill    time.Duration // SIGKILL of the primary until its processes were gone
	Promote time.Duration // pg_ctl promote until the standby accepted writes
	Rejoin  time.Duration // pg_basebackup of the old primary until it streamed as the synchronous standby
}

// PostgresAvailable says why StartPostgres cannot work on this machine, or nil.
func PostgresAvailable() error {
	if _, err := os.Stat(filepath.Join(PostgresBin, "postgres")); err != nil {
		return fmt.Errorf("Postgres 15 binaries in %s (apt-get install postgresql-15): %w", PostgresBin, err)
	}
	if _, err := user.Lookup("postgres"); err != nil {
		return fmt.Errorf("the postgres OS user: %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("starting Postgres as the postgres user needs root")
	}
	return nil
}

// StartPostgres initialises a primary in a directory of its own under dir (Root if
// empty), clones a standby from it with pg_basebackup, and returns once the standby
// streams as the primary's synchronous standby. name tells clusters apart in directory
// names and process titles. On an error everything started is stopped and removed again,
// and the error carries the tail of the nodes' logs.
func StartPostgres(ctx context.Context, dir, name string) (*Postgres, error) {
	return bootPostgres(ctx, dir, name, 2, pairConf)
}

// StartPostgresAlone starts a single Postgres 15 server, with no standby, in a directory
// of its own under dir (Root if empty), and returns once it answers queries. It keeps
// the server's defaults but for loopback-only trust authentication and its log: every
// autovacuum run is logged (log_autovacuum_min_duration = 0), so a run on it can show
// its tables being cleaned. It is for a harness that needs a server whose settings this
// machine's own does not have; Close stops and removes it, and Sweep whatever a killed
// owner left. A single server has no standby: Promote, Rejoin, PauseStandby and
// ResumeStandby return an error, KillPrimary kills it for good.
func StartPostgresAlone(ctx context.Context, dir, name string) (*Postgres, error) {
	return bootPostgres(ctx, dir, name, 1, aloneConf)
}

// pairConf is what StartPostgres adds to the primary's postgresql.conf; the standby
// copies it.
const pairConf = `
# bookstore cluster harness: a primary with one synchronous standby
wal_level = replica
max_wal_senders = 5
max_replication_slots = 5
hot_standby = on
synchronous_commit = on
synchronous_standby_names = '` + synchronous + `'
wal_keep_size = 256MB
max_connections = 100
log_min_messages = warning
log_line_prefix = '%m [%p] '
`

// aloneConf is what StartPostgresAlone adds to the server's postgresql.conf: its log
// only. log_min_messages = warning still writes the autovacuum lines (LOG ranks above
// WARNING in the server's log).
const aloneConf = `
# bookstore harness: one server with the defaults (autovacuum on)
log_autovacuum_min_duration = 0
log_min_messages = warning
log_line_prefix = '%m [%p] '
`

// bootPostgres initialises node 0 with conf added to its postgresql.conf, starts it
// and, with two nodes, clones node 1 from it as its synchronous standby.
func bootPostgres(ctx context.Context, dir, name string, nodes int, conf string) (*Postgres, error) {
	if err := PostgresAvailable(); err != nil {
		return nil, err
	}
	u, _ := user.Lookup("postgres")
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cdir, err := clusterDir(dir, "postgres-"+name)
	if err != nil {
		return nil, fmt.Errorf("start postgres %s: %w", name, err)
	}
	p := &Postgres{dir: cdir, name: name, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nodes: make([]*pgNode, nodes)}
	ok := false
	defer func() {
		if !ok {
			_ = p.Close()
		}
	}()
	for i := range p.nodes {
		n := &pgNode{dir: filepath.Join(cdir, fmt.Sprint("node", i))}
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(n.dir, uid, gid); err != nil {
			return nil, err
		}
		addr, err := testenv.LoopbackAddr()
		if err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(addr)
		n.host = host
		n.port, _ = strconv.Atoi(port)
		p.nodes[i] = n
	}
	ctx, cancel := context.WithTimeout(ctx, PostgresTimeout)
	defer cancel()

	primary := p.nodes[0]
	if err := p.run(ctx, "initdb", "-D", primary.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	if err := appendFile(filepath.Join(primary.data(), "postgresql.conf"), conf); err != nil {
		return nil, err
	}
	// Loopback only, trust: the nodes are on 127.x.y.z addresses of this machine.
	hba := "local all all trust\nlocal replication all trust\nhost all all 127.0.0.0/8 trust\nhost replication all 127.0.0.0/8 trust\n"
	if err := os.WriteFile(filepath.Join(primary.data(), "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}
	if err := os.Chown(filepath.Join(primary.data(), "pg_hba.conf"), uid, gid); err != nil {
		return nil, err
	}
	if err := p.startNode(ctx, 0); err != nil {
		return nil, err
	}
	if nodes > 1 {
		if err := p.cloneStandby(ctx, 1, 0); err != nil {
			return nil, err
		}
	}
	ok = true
	return p, nil
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run runs one of Postgres's programs as the postgres user and returns its output in the
// error if it fails.
func (p *Postgres) run(ctx context.Context, program string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(PostgresBin, program), args...)
	cmd.Dir = p.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C", markEnv + "=" + p.dir + "/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", program, strings.Join(args, " "), err, out)
	}
	return nil
}

// startNode starts node i's postmaster and waits until it answers queries. The node's
// address, port and socket directory are given on the command line, so that the
// postgresql.conf pg_basebackup copies from the other node needs no change; cluster_name
// puts the cluster's directory into every backend's process title, where Sweep finds
// them.
func (p *Postgres) startNode(ctx context.Context, i int) error {
	n := p.nodes[i]
	args := []string{"-D", n.data(),
		"-c", "listen_addresses=" + n.host,
		"-c", "port=" + strconv.Itoa(n.port),
		"-c", "unix_socket_directories=" + n.dir,
		"-c", "cluster_name=/" + filepath.Base(p.dir) + "/node" + strconv.Itoa(i),
	}
	env := []string{"PATH=/usr/bin:/bin", "LANG=C", markEnv + "=" + p.dir + "/"}
	pr, err := startProc(filepath.Join(PostgresBin, "postgres"), args, env, n.dir, n.log(), p.cred)
	if err != nil {
		return err
	}
	p.mu.Lock()
	n.proc = pr
	p.mu.Unlock()
	err = poll(ctx, fmt.Sprintf("postgres %s node %d answers", p.name, i), pr.done, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, p.nodeURL(i))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "SELECT 1")
		return err
	})
	if err != nil {
		return p.withLogs(err)
	}
	return nil
}

// cloneStandby makes node i a fresh copy of node from (pg_basebackup -R: standby.signal
// and primary_conninfo), starts it and waits until from lists it as its synchronous
// standby.
func (p *Postgres) cloneStandby(ctx context.Context, i, from int) error {
	n, src := p.nodes[i], p.nodes[from]
	if err := os.RemoveAll(n.data()); err != nil {
		return err
	}
	conninfo := fmt.Sprintf("host=%s port=%d user=postgres application_name=node%d", src.host, src.port, i)
	if err := p.run(ctx, "pg_basebackup", "-D", n.data(), "-d", conninfo, "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return p.withLogs(err)
	}
	if err := p.startNode(ctx, i); err != nil {
		return err
	}
	// Once the standby streams, the primary waits for it on every commit.
	err := poll(ctx, fmt.Sprintf("postgres %s node %d streams as node %d's synchronous standby", p.name, i, from), n.proc.done, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, p.nodeURL(from))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var state, sync string
		err = conn.QueryRow(ctx, "SELECT state, sync_state FROM pg_stat_replication WHERE client_port IS NOT NULL LIMIT 1").Scan(&state, &sync)
		if err != nil {
			return fmt.Errorf("pg_stat_replication: %w", err)
		}
		if state != "streaming" {
			return fmt.Errorf("standby state %s", state)
		}
		if sync == "async" {
			if err := setSynchronous(ctx, conn, synchronous); err != nil {
				return err
			}
		}
		if sync != "sync" && sync != "quorum" {
			return fmt.Errorf("standby state %s, sync_state %s", state, sync)
		}
		return nil
	})
	if err != nil {
		return p.withLogs(err)
	}
	return nil
}

// nodeURL is node i's own URL, as the superuser.
func (p *Postgres) nodeURL(i int) string {
	n := p.nodes[i]
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", net.JoinHostPort(n.host, strconv.Itoa(n.port)))
}

// withLogs adds the tail of every node's log to err.
func (p *Postgres) withLogs(err error) error {
	for i, n := range p.nodes {
		if n != nil {
			err = fmt.Errorf("%w\n--- postgres %s node %d log:\n%s", err, p.name, i, tail(n.log(), 4000))
		}
	}
	return err
}

// URL is the cluster's URL for user and database: both nodes, with
// target_session_attrs=read-write, so that a client connects to whichever is the primary
// (postgres://user@h0:p0,h1:p1/db?sslmode=disable&target_session_attrs=read-write). A
// connect_timeout of 5s per attempt keeps a node that accepts TCP and never answers (a
// paused standby) from holding the client past the other.
func (p *Postgres) URL(user, database string) string {
	hosts := make([]string, len(p.nodes))
	for i, n := range p.nodes {
		hosts[i] = net.JoinHostPort(n.host, strconv.Itoa(n.port))
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=5", user, strings.Join(hosts, ","), database)
}

// AdminURL is URL for the superuser postgres and its database postgres.
func (p *Postgres) AdminURL() string { return p.URL("postgres", "postgres") }

// NodeURL is node i's own URL as the superuser, for a test that looks at one node.
func (p *Postgres) NodeURL(i int) string { return p.nodeURL(i) }

// Primary is the node that is the primary now (0 or 1).
func (p *Postgres) Primary() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.primary
}

func (p *Postgres) standby() int { return 1 - p.Primary() }

// errNoStandby is what a single server (StartPostgresAlone) answers to a call that needs
// a standby.
var errNoStandby = errors.New("a single Postgres server (StartPostgresAlone) has no standby")

// KillPrimary kills the primary with SIGKILL, with all its processes, as a lost machine
// loses them: its clients' connections break, and a commit it had not acknowledged is
// either on the standby or nowhere.
//
// If the standby is paused (PauseStandby), its WAL receiver is killed too: the WAL the
// primary had sent sits in the paused receiver's socket buffer, and would reach the
// standby once it resumed, which on a real partition it never does.
func (p *Postgres) KillPrimary() error {
	p.mu.Lock()
	n := p.nodes[p.primary]
	pr := n.proc
	n.proc = nil
	paused := p.paused
	var standby *proc
	if len(p.nodes) > 1 {
		standby = p.nodes[1-p.primary].proc
	}
	p.mu.Unlock()
	if pr == nil {
		return errors.New("kill primary: it is not running")
	}
	if err := pr.kill(); err != nil {
		return err
	}
	if paused && standby != nil {
		return killWALReceiver(standby.cmd.Process.Pid)
	}
	return nil
}

// killWALReceiver kills the WAL receiver of the postmaster with SIGKILL: its unread
// socket buffer goes with it.
func killWALReceiver(postmaster int) error {
	for _, pid := range descendants(postmaster) {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if strings.Contains(string(cmdline), "walreceiver") {
			return syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return errors.New("kill the paused standby's WAL receiver: none found")
}

// Promote promotes the standby, waits until it accepts writes, and clears its
// synchronous_standby_names: until Rejoin gives it a standby it commits alone.
//
// It asks again (pg_promote) until the standby has left recovery, rather than once: a
// request can be lost. The postmaster passes it on to the startup process only while
// one runs, and a standby whose WAL receiver was killed (KillPrimary, with the standby
// paused) restarts all its processes first; a request that came meanwhile left its
// signal file behind and nobody to read it, and pg_ctl promote -w waited its 60 s out
// (in two of six fresh .ci/runs).
func (p *Postgres) Promote(ctx context.Context) error {
	if len(p.nodes) < 2 {
		return fmt.Errorf("promote: %w", errNoStandby)
	}
	ctx, cancel := context.WithTimeout(ctx, PostgresTimeout)
	defer cancel()
	s := p.standby()
	n := p.nodes[s]
	if n.proc == nil {
		return errors.New("promote: the standby is not running")
	}
	err := poll(ctx, fmt.Sprintf("postgres %s node %d promoted and accepting writes", p.name, s), n.proc.done, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, p.nodeURL(s))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var recovering bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil {
			return err
		}
		if recovering {
			if _, err := conn.Exec(ctx, "SELECT pg_promote(wait => false)"); err != nil {
				return fmt.Errorf("promote: %w", err)
			}
			return errors.New("still in recovery")
		}
		return setSynchronous(ctx, conn, "")
	})
	if err != nil {
		return p.withLogs(err)
	}
	p.mu.Lock()
	p.primary = s
	p.mu.Unlock()
	return nil
}

// setSynchronous sets synchronous_standby_names and reloads the configuration.
func setSynchronous(ctx context.Context, conn *pgx.Conn, names string) error {
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+strings.ReplaceAll(names, "'", "''")+"'"); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// Rejoin brings the old primary back as the new primary's synchronous standby: a fresh
// pg_basebackup of the new primary on the old one's address, and then the new primary
// waits for it again on every commit.
func (p *Postgres) Rejoin(ctx context.Context) error {
	if len(p.nodes) < 2 {
		return fmt.Errorf("rejoin: %w", errNoStandby)
	}
	ctx, cancel := context.WithTimeout(ctx, PostgresTimeout)
	defer cancel()
	primary := p.Primary()
	old := 1 - primary
	if p.nodes[old].proc != nil {
		return fmt.Errorf("rejoin: node %d still runs", old)
	}
	return p.cloneStandby(ctx, old, primary)
}

// Failover is what CloudNativePG does when a primary's node is lost: KillPrimary, Promote
// the standby, Rejoin the old primary as its standby. It returns how long each step
// took.
func (p *Postgres) Failover(ctx context.Context) (FailoverTimes, error) {
	var t FailoverTimes
	if len(p.nodes) < 2 {
		return t, fmt.Errorf("failover: %w", errNoStandby)
	}
	start := time.Now()
	if err := p.KillPrimary(); err != nil {
		return t, err
	}
	t.Kill = time.Since(start)
	start = time.Now()
	if err := p.Promote(ctx); err != nil {
		return t, err
	}
	t.Promote = time.Since(start)
	start = time.Now()
	if err := p.Rejoin(ctx); err != nil {
		return t, err
	}
	t.Rejoin = time.Since(start)
	return t, nil
}

// PauseStandby stops the standby's processes (SIGSTOP), as a partition cuts it off: it
// receives nothing more, and the primary's commits wait for it.
func (p *Postgres) PauseStandby() error {
	if len(p.nodes) < 2 {
		return fmt.Errorf("pause standby: %w", errNoStandby)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[1-p.primary]
	if n.proc == nil {
		return errors.New("pause standby: it is not running")
	}
	p.paused = true
	return n.proc.signalTree(syscall.SIGSTOP)
}

// ResumeStandby lets a paused standby run again (SIGCONT).
func (p *Postgres) ResumeStandby() error {
	if len(p.nodes) < 2 {
		return fmt.Errorf("resume standby: %w", errNoStandby)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[1-p.primary]
	p.paused = false
	if n.proc == nil {
		return errors.New("resume standby: it is not running")
	}
	return n.proc.signalTree(syscall.SIGCONT)
}

// Close kills every node and removes the cluster's directory.
func (p *Postgres) Close() error {
	var errs []error
	p.mu.Lock()
	procs := []*proc{}
	for _, n := range p.nodes {
		if n != nil && n.proc != nil {
			procs = append(procs, n.proc)
			n.proc = nil
		}
	}
	p.mu.Unlock()
	for _, pr := range procs {
		errs = append(errs, pr.kill())
	}
	killMarked(p.dir)
	errs = append(errs, os.RemoveAll(p.dir))
	return errors.Join(errs...)
}

// LogFiles are the nodes' server logs, by node, for a harness that keeps a copy: Close
// removes them.
func (p *Postgres) LogFiles() []string {
	out := make([]string, len(p.nodes))
	for i, n := range p.nodes {
		out[i] = n.log()
	}
	return out
}

// Logs returns the tail of every node's log, for a failed test to print.
func (p *Postgres) Logs() string { return p.withLogs(errors.New("postgres " + p.name)).Error() }
