package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// RabbitMQBootTimeout bounds how long the nodes of a cluster may take to boot, cluster
// and replicate their quorum queues; several Erlang VMs booting at once on a two-core
// machine that runs other tests take a while.
const RabbitMQBootTimeout = 3 * time.Minute

// RabbitMQ is a cluster of RabbitMQ 3.10 nodes on this machine, configured as docker
// compose configures its one node (deploy/rabbitmq: rabbitmq.conf, enabled_plugins) and
// holding the topology and users of deploy/rabbitmq/definitions.json, with every quorum
// queue replicated to every node.
//
// The definitions are imported once all nodes have joined, not at boot as compose does: a
// quorum queue gets members on the nodes that are in the cluster when it is declared, and
// a node that joins later would hold none. Node i listens on Addrs()[i]; the users log in
// with compose's passwords (ordering/ordering-dev, …) and admin/admin.
type RabbitMQ struct {
	dir    string
	deploy string // deploy/rabbitmq of the checkout
	nodes  []*rabbitNode

	appEnv []string // "-rabbit key value" for each setting of StartRabbitMQ's settings

	mu sync.Mutex // guards each node's proc

	// BootTime is how long StartRabbitMQ took from the first boot until every quorum
	// queue had all its members online.
	BootTime time.Duration
}

// rabbitNode is one node of a RabbitMQ cluster.
type rabbitNode struct {
	name       string // Erlang node name, x@localhost
	dir        string
	host       string // 127.x.y.z, the node's AMQP, management and Prometheus address
	amqp       string // port
	management string
	prometheus string
	dist       string // Erlang distribution port (distPort), on 127.0.0.1 where peers reach x@localhost
	proc       *proc  // nil while down
}

// StartRabbitMQ boots a cluster of n RabbitMQ nodes in a directory of its own under dir
// (Root if empty), imports deploy/rabbitmq/definitions.json, and returns once every quorum
// queue has a member online on every node. Node 0 boots first and the others join it,
// booting in parallel (peer discovery with classic_config, as a StatefulSet's pods find
// each other). On an error everything started is stopped and removed again, and the
// error carries the tail of each node's log.
//
// Each setting is a key and an Erlang term of the rabbit application's environment that
// every node boots with, e.g. Setting{"consumer_timeout", "2000"}: what rabbitmq.conf
// cannot set, or a test needs on a node of its own rather than on the machine's broker.
func StartRabbitMQ(ctx context.Context, dir string, nodes int, settings ...Setting) (*RabbitMQ, error) {
	if nodes < 1 {
		return nil, fmt.Errorf("start rabbitmq: %d nodes", nodes)
	}
	if err := RabbitMQAvailable(); err != nil {
		return nil, err
	}
	deploy, err := deployDir()
	if err != nil {
		return nil, err
	}
	cdir, err := clusterDir(dir, "rabbitmq")
	if err != nil {
		return nil, fmt.Errorf("start rabbitmq: %w", err)
	}
	r := &RabbitMQ{dir: cdir, deploy: deploy}
	for _, s := range settings {
		if !settingKey.MatchString(s.Key) || strings.ContainsAny(s.Value, " \t\n'\"") || s.Value == "" {
			return nil, fmt.Errorf("start rabbitmq: setting %s=%q: want an atom and a term without blanks or quotes", s.Key, s.Value)
		}
		r.appEnv = append(r.appEnv, "-rabbit", s.Key, s.Value)
	}
	ok := false
	defer func() {
		if !ok {
			_ = r.Close()
		}
	}()
	// One cookie for all nodes (and the CLI tools): HOME is the cluster's directory.
	if err := os.WriteFile(filepath.Join(cdir, ".erlang.cookie"), []byte(strings.ToUpper(rand.Text())), 0o400); err != nil {
		return nil, err
	}
	base := fmt.Sprintf("bsc%dx%d", os.Getpid(), seq.Load())
	for i := range nodes {
		n := &rabbitNode{name: fmt.Sprintf("%sn%d@localhost", base, i), dir: filepath.Join(cdir, fmt.Sprint("node", i))}
		if err := os.Mkdir(n.dir, 0o755); err != nil {
			return nil, err
		}
		addr, err := testenv.LoopbackAddr()
		if err != nil {
			return nil, err
		}
		n.host, n.amqp, _ = net.SplitHostPort(addr)
		for _, port := range []*string{&n.management, &n.prometheus} {
			if *port, err = freePort(n.host); err != nil {
				return nil, err
			}
		}
		if n.dist, err = distPort(); err != nil {
			return nil, err
		}
		r.nodes = append(r.nodes, n)
	}
	for i, n := range r.nodes {
		if err := r.writeConfig(i, n); err != nil {
			return nil, err
		}
	}

	began := time.Now()
	bctx, cancel := context.WithTimeout(ctx, RabbitMQBootTimeout)
	defer cancel()
	// The seed node boots first, alone; then the others join it together. A 3.10 node
	// that joined a seed still booting could copy the seed's schema before the seed had
	// enabled its feature flags, and then refuse to boot for a schema that no longer
	// matched its flags (schema_integrity_check_failed, table_attributes_mismatch on
	// rabbit_user and rabbit_vhost: seen once in a loaded make test).
	if err := r.boot(bctx, 0); err != nil {
		return nil, err
	}
	if err := parallel(nodes-1, func(i int) error { return r.boot(bctx, i+1) }); err != nil {
		return nil, err
	}
	if err := r.waitClustered(bctx); err != nil {
		return nil, err
	}
	defs, err := os.ReadFile(filepath.Join(deploy, "definitions.json"))
	if err != nil {
		return nil, err
	}
	if err := r.management(0).Do(bctx, http.MethodPost, "/api/definitions", string(defs), nil); err != nil {
		return nil, fmt.Errorf("import definitions.json: %w", err)
	}
	if err := r.waitQueuesReplicated(bctx); err != nil {
		return nil, err
	}
	r.BootTime = time.Since(began)
	ok = true
	return r, nil
}

// Setting is one key of the rabbit application's environment and its value as an Erlang
// term, for StartRabbitMQ: Setting{"channel_tick_interval", "500"}.
type Setting struct{ Key, Value string }

// settingKey is what a Setting's key may be: a plain Erlang atom.
var settingKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// rabbitmqServer finds the rabbitmq-server script of this machine's RabbitMQ.
func rabbitmqServer() (string, error) {
	scripts, _ := filepath.Glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server")
	if len(scripts) == 0 {
		return "", fmt.Errorf("RabbitMQ server scripts (apt-get install rabbitmq-server): %w", os.ErrNotExist)
	}
	return scripts[len(scripts)-1], nil
}

// RabbitMQAvailable says why StartRabbitMQ cannot work on this machine, or nil.
func RabbitMQAvailable() error {
	_, err := rabbitmqServer()
	return err
}

// deployDir finds deploy/rabbitmq of the checkout: above the working directory (tests
// run in their package's directory, the chaos harness at the root), or else beside this
// source file.
func deployDir() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			candidate := filepath.Join(d, "deploy", "rabbitmq")
			if _, err := os.Stat(filepath.Join(candidate, "definitions.json")); err == nil {
				return candidate, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", errors.New("start rabbitmq: deploy/rabbitmq/definitions.json not found above the working directory")
}

// freePort returns a port that was free on host a moment ago.
func freePort(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}

// distPort returns a free port for a node's Erlang distribution listener, from below the
// kernel's ephemeral range. The listener is on 127.0.0.1, where peers reach x@localhost,
// and a node that stops gives its port up until it boots again: a port from the ephemeral
// range can meanwhile become the local port of any outgoing loopback connection on the
// machine, and the node then cannot boot (dist_port_already_used). Below the range only a
// listener could take it, and listeners pick from the range when they ask for port 0.
func distPort() (string, error) {
	lo, _ := ephemeralPorts()
	const floor = 10000 // above the fixed ports of the machine's servers (5432, 5672, …)
	if lo <= floor+1000 {
		return freePort("127.0.0.1") // an unusual range: nothing below it to choose from
	}
	b := make([]byte, 2)
	for range 100 {
		_, _ = rand.Read(b)
		port := floor + (int(b[0])<<8|int(b[1]))%(lo-floor)
		if port == 25672 { // the machine's own node's, whether or not it runs now
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return strconv.Itoa(port), nil
	}
	return "", fmt.Errorf("no free port between %d and %d on 127.0.0.1", floor, lo)
}

// writeConfig writes node i's rabbitmq.conf: compose's, with the definitions left out
// (StartRabbitMQ imports them once the cluster has formed), moved to the node's ports,
// with admin/admin as the user a blank node creates (the definitions' own admin), and
// peer discovery pointing every node but node 0 at node 0.
func (r *RabbitMQ) writeConfig(i int, n *rabbitNode) error {
	conf, err := os.ReadFile(filepath.Join(r.deploy, "rabbitmq.conf"))
	if err != nil {
		return err
	}
	const load = "load_definitions = /etc/rabbitmq/definitions.json\n"
	if !strings.Contains(string(conf), load) {
		return fmt.Errorf("%s no longer has %q: adapt the cluster harness", filepath.Join(r.deploy, "rabbitmq.conf"), load)
	}
	c := strings.Replace(string(conf), load, "# load_definitions: imported once the cluster has formed\n", 1)
	c += fmt.Sprintf(`
listeners.tcp.default = %s:%s
management.tcp.ip = %s
management.tcp.port = %s
prometheus.tcp.ip = %s
prometheus.tcp.port = %s
default_user = admin
default_pass = admin
default_user_tags.administrator = true
`, n.host, n.amqp, n.host, n.management, n.host, n.prometheus)
	if i > 0 {
		// A joiner that finds node 0 not up (after a restart of both, say) tries again
		// every half second for two minutes, instead of five seconds, before it would
		// give up and start a cluster of its own.
		c += "cluster_formation.peer_discovery_backend = classic_config\n" +
			"cluster_formation.classic_config.nodes.1 = " + r.nodes[0].name + "\n" +
			"cluster_formation.discovery_retry_limit = 240\n" +
			"cluster_formation.discovery_retry_interval = 500\n"
	}
	if err := os.WriteFile(filepath.Join(n.dir, "rabbitmq.conf"), []byte(c), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "rabbitmq-env.conf"), nil, 0o644)
}

// boot starts node i and waits until its management API answers.
func (r *RabbitMQ) boot(ctx context.Context, i int) error {
	n := r.nodes[i]
	script, err := rabbitmqServer()
	if err != nil {
		return err
	}
	env := append(os.Environ(),
		"HOME="+r.dir, // the cluster's one Erlang cookie
		markEnv+"="+r.dir+"/",
		"ERL_CRASH_DUMP="+filepath.Join(n.dir, "erl_crash.dump"),
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(r.deploy, "enabled_plugins"),
		"RABBITMQ_DIST_PORT="+n.dist,
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_PLUGINS_EXPAND_DIR="+filepath.Join(n.dir, "plugins"),
		// Idle schedulers sleep instead of spinning: three VMs share two cores with the
		// services under test.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+strings.Join(append([]string{"+sbwt none +sbwtdcpu none +sbwtdio none -kernel inet_dist_use_interface {127,0,0,1}"}, r.appEnv...), " "),
	)
	p, err := startProc(script, nil, env, n.dir, filepath.Join(n.dir, "server.log"), nil)
	if err != nil {
		return err
	}
	r.mu.Lock()
	n.proc = p
	r.mu.Unlock()
	err = poll(ctx, fmt.Sprintf("rabbitmq node %d (%s) boots", i, n.name), p.done, func(ctx context.Context) error {
		var overview struct {
			Node string `json:"node"`
		}
		if err := r.management(i).Do(ctx, http.MethodGet, "/api/overview", "", &overview); err != nil {
			return err
		}
		if overview.Node != n.name {
			return fmt.Errorf("the management API on %s is node %q's", n.host, overview.Node)
		}
		return nil
	})
	if err != nil {
		return r.withLogs(err, i)
	}
	return nil
}

// withLogs adds the tail of node i's logs to err.
func (r *RabbitMQ) withLogs(err error, i int) error {
	n := r.nodes[i]
	return fmt.Errorf("%w\n--- %s server.log:\n%s\n--- %s log:\n%s", err, n.name, tail(filepath.Join(n.dir, "server.log"), 4000),
		n.name, tail(filepath.Join(n.dir, "log", n.name+".log"), 6000))
}

// allLogs adds the tail of every node's logs to err.
func (r *RabbitMQ) allLogs(err error) error {
	for i := range r.nodes {
		err = r.withLogs(err, i)
	}
	return err
}

// management is the management API of node i, as admin.
func (r *RabbitMQ) management(i int) broker.Management {
	n := r.nodes[i]
	return broker.Management{URL: "http://admin:admin@" + net.JoinHostPort(n.host, n.management)}
}

// running lists the nodes whose process runs.
func (r *RabbitMQ) running() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var up []int
	for i, n := range r.nodes {
		if n.proc != nil && !n.proc.exited() {
			up = append(up, i)
		}
	}
	return up
}

// waitClustered waits until every running node sees every running node as a running
// member of its cluster.
func (r *RabbitMQ) waitClustered(ctx context.Context) error {
	up := r.running()
	want := make([]string, 0, len(up))
	for _, i := range up {
		want = append(want, r.nodes[i].name)
	}
	slices.Sort(want)
	for _, i := range up {
		err := poll(ctx, fmt.Sprintf("rabbitmq node %d sees the cluster %v", i, want), r.nodes[i].proc.done, func(ctx context.Context) error {
			var nodes []struct {
				Name    string `json:"name"`
				Running bool   `json:"running"`
			}
			if err := r.management(i).Do(ctx, http.MethodGet, "/api/nodes?columns=name,running", "", &nodes); err != nil {
				return err
			}
			var got []string
			for _, n := range nodes {
				if n.Running {
					got = append(got, n.Name)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("running members %v", got)
			}
			return nil
		})
		if err != nil {
			return r.allLogs(err)
		}
	}
	return nil
}

// queueInfo is what the management API says about a queue's replicas.
type queueInfo struct {
	Name    string   `json:"name"`
	VHost   string   `json:"vhost"`
	Type    string   `json:"type"`
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Online  []string `json:"online"`
}

// waitQueuesReplicated waits until every quorum queue has a member on every node and the
// members on the running nodes are online.
func (r *RabbitMQ) waitQueuesReplicated(ctx context.Context) error {
	up := r.running()
	if len(up) == 0 {
		return errors.New("no rabbitmq node runs")
	}
	err := poll(ctx, "every quorum queue has its members online", nil, func(ctx context.Context) error {
		var queues []queueInfo
		if err := r.management(up[0]).Do(ctx, http.MethodGet, "/api/queues?columns=name,vhost,type,leader,members,online", "", &queues); err != nil {
			return err
		}
		quorum := 0
		for _, q := range queues {
			if q.Type != "quorum" {
				continue
			}
			quorum++
			for _, i := range up {
				name := r.nodes[i].name
				if !slices.Contains(q.Members, name) || !slices.Contains(q.Online, name) {
					return fmt.Errorf("queue %s in %s: members %v, online %v, want %s among both", q.Name, q.VHost, q.Members, q.Online, name)
				}
			}
			if len(q.Members) != len(r.nodes) {
				return fmt.Errorf("queue %s in %s: members %v, want one on each of %d nodes", q.Name, q.VHost, q.Members, len(r.nodes))
			}
		}
		if quorum == 0 {
			return errors.New("no quorum queue yet")
		}
		return nil
	})
	if err != nil {
		return r.allLogs(err)
	}
	return nil
}

// URL is the AMQP URL of the cluster for user in vhost: every node's address, in node
// order (amqp://user:password@h0:p0,h1:p1,h2:p2/vhost), for a client that dials the next
// address when one is down.
func (r *RabbitMQ) URL(user, password, vhost string) string {
	path := "/"
	if vhost != "/" && vhost != "" {
		path = "/" + url.PathEscape(vhost)
	}
	return "amqp://" + url.UserPassword(user, password).String() + "@" + strings.Join(r.Addrs(), ",") + path
}

// Addrs are the nodes' AMQP addresses (127.x.y.z:port), index = node number.
func (r *RabbitMQ) Addrs() []string {
	addrs := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		addrs[i] = net.JoinHostPort(n.host, n.amqp)
	}
	return addrs
}

// NodeName is node i's Erlang node name, as the management API names it.
func (r *RabbitMQ) NodeName(i int) string { return r.nodes[i].name }

// ManagementURL is the management API of a running node, with the admin's credentials
// (http://admin:admin@127.x.y.z:port); node 0's when none runs.
func (r *RabbitMQ) ManagementURL() string {
	i := 0
	if up := r.running(); len(up) > 0 {
		i = up[0]
	}
	return r.management(i).URL
}

// Leader returns the node that leads the quorum queue in vhost, as a running node sees it.
func (r *RabbitMQ) Leader(ctx context.Context, vhost, queue string) (int, error) {
	up := r.running()
	if len(up) == 0 {
		return -1, errors.New("leader: no rabbitmq node runs")
	}
	var q queueInfo
	if err := r.management(up[0]).Do(ctx, http.MethodGet, "/api/queues/"+url.PathEscape(vhost)+"/"+url.PathEscape(queue), "", &q); err != nil {
		return -1, fmt.Errorf("leader of %s: %w", queue, err)
	}
	for i, n := range r.nodes {
		if n.name == q.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("leader of %s: %q is no node of the cluster", queue, q.Leader)
}

// Kill ends node i with SIGKILL, with all its OS processes, as a lost machine would: no
// goodbye to its peers or clients, who find out from their heartbeats or a reset.
func (r *RabbitMQ) Kill(i int) error {
	p := r.take(i)
	if p == nil {
		return fmt.Errorf("kill rabbitmq node %d: not running", i)
	}
	return p.kill()
}

// Stop shuts node i down gracefully (SIGTERM: it hands its quorum queue leaderships over
// and closes its clients' connections).
func (r *RabbitMQ) Stop(i int) error {
	p := r.take(i)
	if p == nil {
		return fmt.Errorf("stop rabbitmq node %d: not running", i)
	}
	return p.stop(syscall.SIGTERM, 60*time.Second)
}

// take marks node i down and returns its process, nil if it was not running.
func (r *RabbitMQ) take(i int) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.nodes[i].proc
	r.nodes[i].proc = nil
	return p
}

// Start boots node i again, with its data, after Kill or Stop, and returns once it has
// rejoined the cluster and every quorum queue has its members on the running nodes online.
func (r *RabbitMQ) Start(ctx context.Context, i int) error {
	r.mu.Lock()
	running := r.nodes[i].proc != nil
	r.mu.Unlock()
	if running {
		return fmt.Errorf("start rabbitmq node %d: already running", i)
	}
	ctx, cancel := context.WithTimeout(ctx, RabbitMQBootTimeout)
	defer cancel()
	if err := r.boot(ctx, i); err != nil {
		return err
	}
	if err := r.waitClustered(ctx); err != nil {
		return err
	}
	return r.waitQueuesReplicated(ctx)
}

// Close kills every node and removes the cluster's directory.
func (r *RabbitMQ) Close() error {
	var errs []error
	errs = append(errs, parallel(len(r.nodes), func(i int) error {
		if p := r.take(i); p != nil {
			return p.kill()
		}
		return nil
	}))
	killMarked(r.dir)
	errs = append(errs, os.RemoveAll(r.dir))
	return errors.Join(errs...)
}

// Logs returns, for a failed test to print, what a running node says about every queue's
// replicas and the tail of each node's logs.
func (r *RabbitMQ) Logs(ctx context.Context) string {
	var b strings.Builder
	if up := r.running(); len(up) > 0 {
		var queues []queueInfo
		err := r.management(up[0]).Do(ctx, http.MethodGet, "/api/queues?columns=name,vhost,type,leader,members,online", "", &queues)
		fmt.Fprintf(&b, "queues as node %d sees them (%v):\n", up[0], err)
		for _, q := range queues {
			fmt.Fprintf(&b, "  %s %s leader %s members %v online %v\n", q.Name, q.Type, q.Leader, q.Members, q.Online)
		}
	}
	for i := range r.nodes {
		fmt.Fprintf(&b, "%v\n", r.withLogs(fmt.Errorf("node %d", i), i))
	}
	return b.String()
}

// ephemeralPorts is the range the kernel takes outgoing connections' local ports from.
func ephemeralPorts() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		l, err1 := strconv.Atoi(f[0])
		h, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			return l, h
		}
	}
	return lo, hi
}
