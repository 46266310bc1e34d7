package deploy

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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

// TestRabbitMQBootsWithTheComposeConfig boots a private RabbitMQ node of this machine's
// version (3.10, as in docker compose) with the very rabbitmq.conf, enabled_plugins and
// definitions.json that compose mounts, on free loopback ports, and checks what the
// container would do: the config parses (an unknown key stops RabbitMQ from booting), the
// definitions load, the users log in with compose's passwords, and the Prometheus plugin
// exports the per-queue metrics the dashboard graphs.
func TestRabbitMQBootsWithTheComposeConfig(t *testing.T) {
	t.Parallel()
	scripts, _ := filepath.Glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server")
	if len(scripts) == 0 {
		testenv.Unavailable(t, "RabbitMQ server scripts (apt-get install rabbitmq-server)", os.ErrNotExist)
	}
	root := repoRoot(t)
	dir := t.TempDir()
	conf, err := os.ReadFile(filepath.Join(root, "deploy/rabbitmq/rabbitmq.conf"))
	if err != nil {
		t.Fatal(err)
	}
	defs := filepath.Join(root, definitionsFile)
	if !strings.Contains(string(conf), "load_definitions = /etc/rabbitmq/definitions.json\n") {
		t.Fatal("rabbitmq.conf does not load /etc/rabbitmq/definitions.json, where compose mounts the file")
	}
	ports := map[string]string{}
	for _, name := range []string{"amqp", "management", "prometheus", "dist"} {
		_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
		ports[name] = port
	}
	// The file as compose mounts it, pointed at this checkout's definitions and moved off
	// the ports of the machine's own broker.
	testConf := strings.Replace(string(conf), "/etc/rabbitmq/definitions.json", defs, 1) + `
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
	cmd := exec.Command(scripts[len(scripts)-1])
	cmd.Dir = dir // a node that fails to boot leaves erl_crash.dump here, not in the checkout
	cmd.Env = append(os.Environ(),
		"HOME="+dir, // its own Erlang cookie
		"ERL_CRASH_DUMP="+filepath.Join(dir, "erl_crash.dump"),
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(root, "deploy/rabbitmq/enabled_plugins"),
		"RABBITMQ_DIST_PORT="+ports["dist"],
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PLUGINS_EXPAND_DIR="+filepath.Join(dir, "plugins"),
	)
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
	logs := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }

	// Ready when the exporter lists every queue of the contracts and every DLQ.
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
			t.Fatalf("RabbitMQ stopped during boot:\n%s", logs())
		default:
		}
		seen = queueMetrics(metricsURL)
		complete := true
		for metric := range externalMetrics {
			for q := range wantQueues {
				complete = complete && seen[metric][q]
			}
		}
		if complete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s the exporter on %s lacks %v for queues %v (saw %v):\n%s", metricsURL, slices.Sorted(keys(externalMetrics)), slices.Sorted(keys(wantQueues)), seen, logs())
		}
		time.Sleep(500 * time.Millisecond)
	}

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
