package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
)

// rabbitServer is one version of the RabbitMQ server a test can boot.
type rabbitServer struct {
	version string // x.y.z, from the directory of its rabbitmq-server script
	root    string // the Debian root it runs chrooted in; "" for this machine's own
	script  string // its rabbitmq-server script, inside root
}

// rabbitServerIn finds the newest rabbitmq-server script under root ("" for this machine),
// or returns false.
func rabbitServerIn(root string) (rabbitServer, bool) {
	scripts, _ := filepath.Glob(filepath.Join(root, "/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server"))
	if len(scripts) == 0 {
		return rabbitServer{}, false
	}
	script := scripts[len(scripts)-1]
	version := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(script))), "rabbitmq_server-")
	return rabbitServer{version: version, root: root, script: "/" + strings.TrimPrefix(strings.TrimPrefix(script, root), "/")}, true
}

// series is the server's major.minor, as an image tag pins it.
func (s rabbitServer) series() string {
	parts := strings.SplitN(s.version, ".", 3)
	if len(parts) < 2 {
		return s.version
	}
	return parts[0] + "." + parts[1]
}

// acceptedDeprecations are the deprecated features RabbitMQ logs as used when it boots
// with compose's configuration, each with why it stays (rabbitmq.conf says more). Any
// other one fails TestRabbitMQ43BootsWithTheComposeConfig: a feature a later minor will
// refuse by default, taken on without anyone deciding to. So does one of these no longer
// logged: its reason to stay is gone, and so is the entry.
var acceptedDeprecations = map[string]string{
	"management_metrics_collection": "the management UI's queue depths and KEDA's http scaler read them",
}

// TestRabbitMQBootsWithTheComposeConfig boots a private RabbitMQ node of this machine's
// version (3.10: `make run`, the tests and testenv/cluster use it with deploy/rabbitmq's
// files) with the very rabbitmq.conf, enabled_plugins and definitions.json that compose
// mounts, on free loopback ports, and checks what the container would do (see
// checkComposeRabbitMQ).
func TestRabbitMQBootsWithTheComposeConfig(t *testing.T) {
	t.Parallel()
	s, ok := rabbitServerIn("")
	if !ok {
		testenv.Unavailable(t, "RabbitMQ server scripts (apt-get install rabbitmq-server)", os.ErrNotExist)
	}
	checkComposeRabbitMQ(t, s)
}

// TestRabbitMQ43BootsWithTheComposeConfig boots the same files on RabbitMQ 4.3, the
// series compose and both Kubernetes overlays run, from the Debian forky root (Debian's
// 4.3.6 on Erlang 29), and checks the same, and that 4.3 logs exactly the deprecated
// features in use that acceptedDeprecations keeps on purpose.
func TestRabbitMQ43BootsWithTheComposeConfig(t *testing.T) {
	t.Parallel()
	root := currentRoot(t, "usr/lib/rabbitmq/lib")
	s, ok := rabbitServerIn(root)
	if !ok {
		testenv.Unavailable(t, "RabbitMQ server scripts in "+root, os.ErrNotExist)
	}
	if s.series() != composeRabbitMQSeries(t) {
		t.Fatalf("the root holds RabbitMQ %s, compose runs %s: the boot would not test compose's broker", s.version, composeRabbitMQSeries(t))
	}
	log := checkComposeRabbitMQ(t, s)
	logged := map[string]bool{}
	for _, m := range deprecatedInUse.FindAllStringSubmatch(log, -1) {
		logged[m[1]] = true
		if why, ok := acceptedDeprecations[m[1]]; ok {
			t.Logf("deprecated feature %s in use, accepted: %s", m[1], why)
			continue
		}
		t.Errorf("RabbitMQ %s logs the deprecated feature %s as used by compose's configuration:\n%s", s.version, m[1], m[0])
	}
	for name := range acceptedDeprecations {
		if !logged[name] {
			t.Errorf("RabbitMQ %s no longer logs the deprecated feature %s as used: drop it from acceptedDeprecations and rabbitmq.conf's comment", s.version, name)
		}
	}
}

// deprecatedInUse matches RabbitMQ's warning that a deprecated feature is used.
var deprecatedInUse = regexp.MustCompile("Deprecated features: `([a-z0-9_]+)`[^\n]*")

// composeRabbitMQSeries is the major.minor of compose's RabbitMQ image.
func composeRabbitMQSeries(t testing.TB) string {
	t.Helper()
	img := loadCompose(t, nil, composeFile).Services["rabbitmq"].Image
	m := regexp.MustCompile(`^rabbitmq:(\d+\.\d+)(\.\d+)?-management$`).FindStringSubmatch(img)
	if m == nil {
		t.Fatalf("compose's broker image %q is not rabbitmq:<major>.<minor>[.<patch>]-management", img)
	}
	return m[1]
}

// checkComposeRabbitMQ boots a private node of s with compose's rabbitmq.conf,
// enabled_plugins and definitions.json on free loopback ports and checks what the
// container would do: the config parses (an unknown key stops RabbitMQ from booting), the
// definitions load, nothing is logged as an error, the users log in with compose's
// passwords and nobody logs in without one, the management API reports each queue's
// depth, the Prometheus plugin exports the per-queue metrics the dashboard graphs, and
// max_message_size holds. It returns the node's log.
func checkComposeRabbitMQ(t *testing.T, s rabbitServer) string {
	t.Helper()
	root := repoRoot(t)
	conf, err := os.ReadFile(filepath.Join(root, "deploy/rabbitmq/rabbitmq.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "load_definitions = /etc/rabbitmq/definitions.json\n") {
		t.Fatal("rabbitmq.conf does not load /etc/rabbitmq/definitions.json, where compose mounts the file")
	}
	// The node's directory: inside the Debian root for a chrooted server, where it reads
	// copies of the files compose mounts.
	var dir, nodeDir string
	if s.root != "" {
		dir, nodeDir = rootTempDir(t, s.root)
	} else {
		dir = t.TempDir()
		nodeDir = dir
	}
	for _, f := range []string{definitionsFile, "deploy/rabbitmq/enabled_plugins"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ports := map[string]string{}
	for _, name := range []string{"amqp", "management", "prometheus", "dist"} {
		_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
		ports[name] = port
	}
	// The file as compose mounts it, pointed at the copy of the definitions and moved off
	// the ports of the machine's own broker.
	testConf := strings.Replace(string(conf), "/etc/rabbitmq/definitions.json", nodeDir+"/definitions.json", 1) + `
listeners.tcp.default = 127.0.0.1:` + ports["amqp"] + `
management.tcp.ip = 127.0.0.1
management.tcp.port = ` + ports["management"] + `
prometheus.tcp.ip = 127.0.0.1
prometheus.tcp.port = ` + ports["prometheus"] + "\n"
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(testConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq-env.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	node := strings.ReplaceAll(testenv.Name("tdeploy"), "_", "") + "@localhost"
	nodeEnv := []string{
		"HOME=" + nodeDir, // its own Erlang cookie
		"ERL_CRASH_DUMP=" + nodeDir + "/erl_crash.dump",
		"RABBITMQ_NODENAME=" + node,
		"RABBITMQ_CONF_ENV_FILE=" + nodeDir + "/rabbitmq-env.conf",
		"RABBITMQ_CONFIG_FILE=" + nodeDir + "/rabbitmq.conf",
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + nodeDir + "/enabled_plugins",
		"RABBITMQ_DIST_PORT=" + ports["dist"],
		"RABBITMQ_MNESIA_BASE=" + nodeDir + "/mnesia",
		"RABBITMQ_LOG_BASE=" + nodeDir + "/log",
		"RABBITMQ_PLUGINS_EXPAND_DIR=" + nodeDir + "/plugins",
	}
	var cmd *exec.Cmd
	if s.root != "" {
		cmd = chrootCommand(s.root, "", nodeEnv, s.script)
	} else {
		cmd = exec.Command(s.script)
		cmd.Env = append(os.Environ(), nodeEnv...)
	}
	cmd.Dir = dir // a node that fails to boot leaves erl_crash.dump here, not in the checkout
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the node and its helpers, stopped together
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logFile.Close()
	})
	// The node's own log file has what the console does not once its handlers are set up.
	nodeLog := filepath.Join(dir, "log", strings.TrimSuffix(node, "@localhost")+"@localhost.log")
	logs := func() string {
		a, _ := os.ReadFile(logFile.Name())
		b, _ := os.ReadFile(nodeLog)
		return string(a) + string(b)
	}

	// Ready when the exporter lists every queue of the contracts and every DLQ, and the
	// AMQP listener accepts connections: RabbitMQ opens its listeners last, after the
	// definitions and the plugins, and 4.3's exporter answered with every queue before
	// its listener did (the logins below were refused once).
	metricsURL := "http://127.0.0.1:" + ports["prometheus"] + "/metrics"
	wantQueues := map[string]bool{}
	for _, q := range contracts.Topology.Queues {
		wantQueues[q.Name], wantQueues[q.DLQ()] = true, true
	}
	deadline := time.Now().Add(90 * time.Second)
	var seen map[string]map[string]bool // metric -> queues
	for {
		select {
		case <-done:
			t.Fatalf("RabbitMQ %s stopped during boot:\n%s", s.version, logs())
		default:
		}
		seen = queueMetrics(metricsURL)
		complete := true
		for metric := range externalMetrics {
			for q := range wantQueues {
				complete = complete && seen[metric][q]
			}
		}
		if complete && accepts("127.0.0.1:"+ports["amqp"]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s RabbitMQ %s is not ready: its exporter on %s lacks %v for queues %v (saw %v), or its AMQP listener on :%s does not accept (%v):\n%s", s.version, metricsURL, slices.Sorted(keys(externalMetrics)), slices.Sorted(keys(wantQueues)), seen, ports["amqp"], accepts("127.0.0.1:"+ports["amqp"]), logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("RabbitMQ %s booted with compose's configuration", s.version)

	// The administrator of the management UI, and every service user with its compose
	// password, as the containers log in.
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+ports["management"]+"/api/whoami", nil)
	req.SetBasicAuth("admin", "admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("management login as admin/admin: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	compose := loadCompose(t, nil, composeFile)
	for _, c := range contractServices {
		v := env(compose.Services[c.Name], "AMQP_URL")
		if v == "" {
			continue // emailprovider does not use the broker
		}
		u, _ := url.Parse(v)
		u.Host = "127.0.0.1:" + ports["amqp"]
		conn, err := amqp.Dial(u.String())
		if err != nil {
			t.Errorf("%s logs in with its compose AMQP_URL: %v", c.Name, err)
			continue
		}
		_ = conn.Close()
	}
	// A client that names no user is not even offered a way in: RabbitMQ 4.x would log it
	// in as guest through ANONYMOUS unless rabbitmq.conf lists the mechanisms.
	checkNoAnonymousLogin(t, s.version, "127.0.0.1:"+ports["amqp"])

	// Every queue's depth on the management API, as the UI and production's KEDA scaler
	// (protocol http) read it: the management plugin's statistics are on.
	for q := range wantQueues {
		checkManagementDepth(t, "http://127.0.0.1:"+ports["management"], q)
	}

	// The broker's own bound on a message: one larger than max_message_size is refused at
	// the publish (the channel closed with 406), whoever publishes it, and one within it
	// is taken. Consumers bound what they read lower still (consumer.DefaultMaxMessageSize).
	max := maxMessageSize(t, string(conf))
	conn, err := amqp.Dial("amqp://admin:admin@127.0.0.1:" + ports["amqp"] + "/")
	if err != nil {
		t.Fatalf("dial as admin: %v", err)
	}
	defer conn.Close()
	for _, c := range []struct {
		size    int
		refused bool
	}{{max, false}, {max + 1, true}} {
		if got := publishRefused(t, conn, c.size); got != c.refused {
			t.Errorf("a message of %d bytes (max_message_size %d): refused %v, want %v", c.size, max, got, c.refused)
		}
	}

	log := logs()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "[error]") {
			t.Errorf("RabbitMQ %s logged an error booting with compose's configuration: %s", s.version, line)
		}
	}
	return log
}

// checkNoAnonymousLogin fails the test unless the broker (version) at addr refuses to
// negotiate SASL ANONYMOUS, the mechanism of a client that names no user.
func checkNoAnonymousLogin(t *testing.T, version, addr string) {
	t.Helper()
	// The client leaves its socket open when no mechanism is shared, and the broker would
	// log the handshake's timeout as an error: the socket is closed here.
	var sock net.Conn
	defer func() {
		if sock != nil {
			_ = sock.Close()
		}
	}()
	dial := func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, 10*time.Second)
		sock = c
		return c, err
	}
	conn, err := amqp.DialConfig("amqp://"+addr+"/", amqp.Config{SASL: []amqp.Authentication{anonymousLogin{}}, Dial: dial})
	switch {
	case err == nil:
		_ = conn.Close()
		t.Errorf("RabbitMQ %s lets a client in without a user (SASL ANONYMOUS)", version)
	case !errors.Is(err, amqp.ErrSASL):
		t.Errorf("RabbitMQ %s offers SASL ANONYMOUS (the login then failed: %v); rabbitmq.conf's auth_mechanisms should leave it out", version, err)
	}
}

// anonymousLogin is the SASL mechanism ANONYMOUS: a client that names no user.
type anonymousLogin struct{}

func (anonymousLogin) Mechanism() string { return "ANONYMOUS" }
func (anonymousLogin) Response() string  { return "" }

// checkManagementDepth waits until the management API at base reports queue's depth
// ("messages"), which it does once the management plugin's statistics have been
// collected for the queue, and fails the test if it never does.
func checkManagementDepth(t *testing.T, base, queue string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/queues/%2F/"+url.PathEscape(queue), nil)
		req.SetBasicAuth("admin", "admin")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var q map[string]any
			err = json.NewDecoder(resp.Body).Decode(&q)
			resp.Body.Close()
			if _, ok := q["messages"]; ok && err == nil {
				return
			}
			last = fmt.Sprintf("%d, fields %v", resp.StatusCode, slices.Sorted(keys(q)))
		} else {
			last = err.Error()
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("the management API reports no depth (\"messages\") of queue %s after 30s: %s", queue, last)
}

// maxMessageSize reads max_message_size from rabbitmq.conf.
func maxMessageSize(t *testing.T, conf string) int {
	t.Helper()
	for _, line := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "max_message_size" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("max_message_size %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("rabbitmq.conf sets no max_message_size: the broker takes messages of up to 128 MB")
	return 0
}

// publishRefused publishes size bytes with confirms on a channel of its own and reports
// whether the broker refused it by closing the channel instead of confirming.
func publishRefused(t *testing.T, conn *amqp.Connection, size int) bool {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "no-such-queue", false, false, amqp.Publishing{Body: make([]byte, size)})
	if err != nil {
		return true
	}
	if ok, _ := dc.WaitContext(ctx); ok {
		return false
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.PreconditionFailed {
			t.Errorf("the channel closed with %v, want 406 PRECONDITION_FAILED", e)
		}
	case <-ctx.Done():
		t.Errorf("a message of %d bytes was neither confirmed nor refused by a close", size)
	}
	return true
}

// queueMetrics scrapes RabbitMQ's exporter and returns, per metric, the queues it has a
// series for.
func queueMetrics(url string) map[string]map[string]bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	out := map[string]map[string]bool{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					if out[name] == nil {
						out[name] = map[string]bool{}
					}
					out[name][l.GetValue()] = true
				}
			}
		}
	}
	return out
}

// accepts says whether something accepts TCP connections at addr.
func accepts(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
	}
	return err == nil
}
