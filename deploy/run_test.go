package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// The tests of deploy/local/run.sh hold what `make run` promises a user: the system starts
// with the variables the README names, Ctrl-C stops all of it, one process exiting stops
// the rest, and the demos' relay runs apart. They run the script on stand-in processes,
// since the real services take the fixed ports 8081-8084. (The real binaries: `make run`.)

// standIn writes an executable that logs a line, records the signal it is stopped with
// in dir/<name>.stopped (dir/<name>-<first argument>.stopped when it has arguments), and
// otherwise runs until stopped, or exits with status exit after a moment when exit is not
// empty.
func standIn(t *testing.T, dir, name, exit string) {
	t.Helper()
	script := `#!/usr/bin/env bash
echo "` + name + ` started with LOG_LEVEL=$LOG_LEVEL"
echo "` + name + ` admin ${DATABASE_ADMIN_URL-unset}"
echo "` + name + ` amqp ${AMQP_URL-unset}"
echo "` + name + ` db ${DATABASE_URL-unset}"
echo "` + name + ` inventory-admin ${INVENTORY_ADMIN-unset} provider-admin ${EMAILPROVIDER_ADMIN-unset}"
echo "` + name + ` provider-keys ${EMAILPROVIDER_API_KEYS-unset} provider-key ${EMAILPROVIDER_API_KEY-unset}"
echo "` + name + ` args [$*] pid $$ ORDERING_RELAY=${ORDERING_RELAY-unset} STOREFRONT_RELAY_PID=${STOREFRONT_RELAY_PID-unset}"
trap 'echo TERM > "` + filepath.Join(dir, name) + `${1:+-$1}.stopped"; exit 0' TERM
if [[ -n "` + exit + `" ]]; then sleep 1; echo "` + name + ` failing"; exit ` + exit + `; fi
while true; do sleep 0.1; done
`
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe to read while the script writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startRunScript runs run.sh on the stand-ins in binDir, without the DATABASE_ADMIN_URL
// and AMQP_URL of the test's own environment, with a vhost of the test's own for the
// services, and with extraEnv.
func startRunScript(t *testing.T, binDir string, extraEnv ...string) (*exec.Cmd, *syncBuffer, chan error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "deploy", "local", "run.sh"))
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_ADMIN_URL=") && !strings.HasPrefix(kv, "AMQP_URL=") {
			environ = append(environ, kv)
		}
	}
	// The services' vhost, which run.sh prepares on the local broker: one of the test's
	// own, deleted with its administrator when the test ends.
	vhost := testenv.Name("run")
	t.Cleanup(func() {
		managementDelete(t, "/api/vhosts/"+vhost)
		managementDelete(t, "/api/users/"+vhost+"-admin")
	})
	cmd.Env = append(environ, "BIN_DIR="+binDir, "READY_TIMEOUT=1", "LOG_LEVEL=debug",
		"RABBITMQ_MANAGEMENT_URL="+testenv.ManagementURL(), "RABBITMQ_VHOST="+vhost)
	cmd.Env = append(cmd.Env, extraEnv...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	return cmd, out, done
}

func waitOutput(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("run.sh never printed %q:\n%s", want, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// interrupt sends run.sh SIGTERM, as Ctrl-C's INT would, and returns its exit status.
func interrupt(t *testing.T, cmd *exec.Cmd, out *syncBuffer, done chan error) int {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		t.Fatalf("run.sh did not stop after SIGTERM:\n%s", out)
		return 0
	}
}

// checkStopped fails the test for each of names (a stand-in, or <stand-in>-<argument>)
// that was not stopped with SIGTERM.
func checkStopped(t *testing.T, bin string, out *syncBuffer, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(bin, name+".stopped")); err != nil {
			t.Errorf("%s was not stopped with SIGTERM: %v\n%s", name, err, out)
		}
	}
}

// TestRunScriptStartsTheSystemAndStopsItOnSIGTERM: make run starts what bin/ holds (the
// services not built yet skipped), gives them this shell's variables (an AMQP_URL to
// all), the local superuser and INVENTORY_ADMIN=1 as the README says, prints the
// storefront's URL, and stops every process with SIGTERM when it is stopped.
func TestRunScriptStartsTheSystemAndStopsItOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	for _, name := range []string{"ordering", "emailprovider", "storefront"} {
		standIn(t, bin, name, "")
	}
	const mine = "amqp://guest:guest@localhost:5672/mine"
	cmd, out, done := startRunScript(t, bin, "AMQP_URL="+mine)

	waitOutput(t, out, "running: ordering emailprovider storefront")
	for _, want := range []string{
		"ordering       | ordering started with LOG_LEVEL=debug",
		"ordering       | ordering amqp " + mine,
		"ordering       | ordering admin postgres://postgres@localhost:5432/postgres?sslmode=disable",
		"ordering       | ordering inventory-admin 1",
		"http://localhost:8080",
	} {
		waitOutput(t, out, want)
	}
	if code := interrupt(t, cmd, out, done); code != 143 {
		t.Errorf("run.sh exited with %d after SIGTERM, want 143", code)
	}
	checkStopped(t, bin, out, "ordering", "emailprovider", "storefront")
}

// TestRunScriptStartsTheStorefrontAfterTheServices: the storefront's page reads
// inventory's books, so make run starts it only once the services answer /readyz (here,
// stand-ins that never do, once READY_TIMEOUT has passed), saying so in one line. Each
// service gets a DATABASE_URL naming its own role with compose's password, which the
// local Postgres ignores and compose's checks; the storefront has no database.
func TestRunScriptStartsTheStorefrontAfterTheServices(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	for _, name := range []string{"ordering", "emailprovider", "storefront"} {
		standIn(t, bin, name, "")
	}
	cmd, out, done := startRunScript(t, bin)

	waitOutput(t, out, "running: ordering emailprovider storefront")
	for _, want := range []string{
		"ordering       | ordering db postgres://ordering:ordering-dev@localhost:5432/ordering?sslmode=disable",
		"emailprovider  | emailprovider db postgres://emailprovider:emailprovider-dev@localhost:5432/emailprovider?sslmode=disable",
		"storefront     | storefront db unset",
	} {
		waitOutput(t, out, want)
	}
	text := out.String()
	waiting := strings.Index(text, "waiting for ordering emailprovider to answer /readyz (up to 1 s) before starting the storefront")
	notReady := strings.Index(text, "emailprovider is not ready on port 8084")
	started := strings.Index(text, "storefront     | storefront started")
	if waiting < 0 || notReady < 0 || started < 0 || !(waiting < notReady && notReady < started) {
		t.Errorf("want the waiting line, then the services' wait over, then the storefront started:\n%s", text)
	}
	interrupt(t, cmd, out, done)
	checkStopped(t, bin, out, "ordering", "emailprovider", "storefront")
}

// TestRunScriptStopsEverythingWhenOneExits: a half-running system that looks healthy is
// worse than a clear stop, so one process exiting stops the others and make run fails.
func TestRunScriptStopsEverythingWhenOneExits(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	standIn(t, bin, "ordering", "")
	standIn(t, bin, "notification", "3")
	cmd, out, done := startRunScript(t, bin)

	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run.sh kept running after notification exited:\n%s", out)
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("run.sh exited with %d, want 1", code)
	}
	if want := "notification exited with status 3"; !strings.Contains(out.String(), want) {
		t.Errorf("run.sh output lacks %q:\n%s", want, out)
	}
	checkStopped(t, bin, out, "ordering")
}

// brokerServices are the services with a broker user; the email provider has none.
var brokerServices = []string{"ordering", "inventory", "notification"}

// runScriptAMQPURLs runs run.sh on stand-ins of the broker services and returns the
// AMQP_URL each was started with.
func runScriptAMQPURLs(t *testing.T) map[string]string {
	t.Helper()
	bin := t.TempDir()
	for _, name := range brokerServices {
		standIn(t, bin, name, "")
	}
	cmd, out, done := startRunScript(t, bin)
	waitOutput(t, out, "running: "+strings.Join(brokerServices, " "))
	urls := map[string]string{}
	for _, name := range brokerServices {
		prefix := fmt.Sprintf("%-14s | %s amqp ", name, name)
		waitOutput(t, out, prefix)
		for _, line := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				urls[name] = v
			}
		}
	}
	interrupt(t, cmd, out, done)
	return urls
}

// TestLocalBrokerUsers runs deploy/local/rabbitmq-users.sh (services.sh's last step)
// twice on the local broker and checks that each service user then has exactly the
// permissions and topic permissions definitions.json gives it on "/", that guest is
// untouched, and that a connection made with the AMQP_URL run.sh gives a service is that
// service's user on run.sh's vhost, as the management API sees it.
func TestLocalBrokerUsers(t *testing.T) {
	t.Parallel()
	d := readDefinitions(t)
	script := filepath.Join(repoRoot(t), "deploy", "local", "rabbitmq-users.sh")
	for range 2 { // idempotent: a second run succeeds and changes nothing
		cmd := exec.Command(script)
		cmd.Env = append(os.Environ(), "RABBITMQ_MANAGEMENT_URL="+testenv.ManagementURL())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}

	var perms []defPermission
	if err := json.Unmarshal(management(t, http.MethodGet, "/api/permissions", nil), &perms); err != nil {
		t.Fatal(err)
	}
	var topics []defTopicPermission
	if err := json.Unmarshal(management(t, http.MethodGet, "/api/topic-permissions", nil), &topics); err != nil {
		t.Fatal(err)
	}
	byUser := func(user string) (p []defPermission, tp []defTopicPermission, want []defPermission, wantTP []defTopicPermission) {
		for _, x := range perms {
			if x.User == user && x.Vhost == "/" {
				p = append(p, x)
			}
		}
		for _, x := range topics {
			if x.User == user && x.Vhost == "/" {
				tp = append(tp, x)
			}
		}
		for _, x := range d.Permissions {
			if x.User == user {
				want = append(want, x)
			}
		}
		for _, x := range d.TopicPermissions {
			if x.User == user {
				wantTP = append(wantTP, x)
			}
		}
		return
	}
	for _, name := range brokerServices {
		got, gotTP, want, wantTP := byUser(name)
		if len(want) != 1 || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: permissions on / %+v, want %+v (%s)", name, got, want, definitionsFile)
		}
		if !reflect.DeepEqual(gotTP, wantTP) {
			t.Errorf("%s: topic permissions on / %+v, want %+v (%s)", name, gotTP, wantTP, definitionsFile)
		}
		var user struct {
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(management(t, http.MethodGet, "/api/users/"+name, nil), &user); err != nil {
			t.Fatal(err)
		}
		if len(user.Tags) != 0 {
			t.Errorf("%s: tags %v, want none", name, user.Tags)
		}
	}
	if got, _, _, _ := byUser("guest"); len(got) != 1 || got[0].Configure != ".*" || got[0].Write != ".*" || got[0].Read != ".*" {
		t.Errorf("guest's permissions on / are now %+v, want .* for all three", got)
	}

	// Log in as run.sh would have each service log in, and look at the connection.
	base, err := url.Parse(testenv.AMQPBase())
	if err != nil {
		t.Fatal(err)
	}
	wantUser := map[string]string{} // connection_name → the user it must be made as
	for name, runURL := range runScriptAMQPURLs(t) {
		u, err := url.Parse(runURL)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = base.Host // the local broker the tests use, which is localhost:5672 by default
		connName := testenv.Name("run-" + name)
		conn, err := amqp.DialConfig(u.String(), amqp.Config{Properties: amqp.Table{"connection_name": connName}})
		if err != nil {
			t.Errorf("%s: log in with run.sh's AMQP_URL: %v", name, err)
			continue
		}
		defer conn.Close()
		wantUser[connName] = name + " on " + strings.TrimPrefix(u.Path, "/")
	}
	gotUser := map[string]string{}
	// The management API lists a connection once its stats are first collected.
	for deadline := time.Now().Add(15 * time.Second); len(gotUser) < len(wantUser) && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var conns []struct {
			User             string `json:"user"`
			Vhost            string `json:"vhost"`
			ClientProperties struct {
				ConnectionName string `json:"connection_name"`
			} `json:"client_properties"`
		}
		if err := json.Unmarshal(management(t, http.MethodGet, "/api/connections", nil), &conns); err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			if _, ok := wantUser[c.ClientProperties.ConnectionName]; ok {
				gotUser[c.ClientProperties.ConnectionName] = c.User + " on " + c.Vhost
			}
		}
	}
	for connName, want := range wantUser {
		if got := gotUser[connName]; got != want {
			t.Errorf("connection %s made as %q, want %q", connName, got, want)
		}
	}
}

// TestRunScriptRunsTheRelayApartWithDemos: STOREFRONT_DEMOS=1 make run gives the
// storefront's panel what its buttons need: ordering's relay as a process of its own
// (`ordering relay`, ORDERING_RELAY=1, as ordering's broker user) beside ordering
// without it (ORDERING_RELAY=0), that process's pid to the storefront, and
// EMAILPROVIDER_ADMIN=1; a relay the panel left paused (SIGSTOP) still stops at the end.
func TestRunScriptRunsTheRelayApartWithDemos(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	for _, name := range []string{"ordering", "emailprovider", "storefront"} {
		standIn(t, bin, name, "")
	}
	cmd, out, done := startRunScript(t, bin, "STOREFRONT_DEMOS=1")
	waitOutput(t, out, "running: ordering ordering-relay emailprovider storefront")
	for _, name := range []string{"ordering      ", "ordering-relay", "storefront    "} {
		waitOutput(t, out, name+" | ")
	}
	waitOutput(t, out, "emailprovider  | emailprovider inventory-admin")

	line := regexp.MustCompile(`(?m)^(\S+) +\| \S+ args \[(.*)\] pid (\d+) ORDERING_RELAY=(\S+) STOREFRONT_RELAY_PID=(\S+)$`)
	type started struct{ args, pid, relay, relayPID string }
	got := map[string]started{}
	for _, m := range line.FindAllStringSubmatch(out.String(), -1) {
		got[m[1]] = started{m[2], m[3], m[4], m[5]}
	}
	relay, api, storefront := got["ordering-relay"], got["ordering"], got["storefront"]
	if relay.args != "relay" || relay.relay != "1" {
		t.Errorf("ordering-relay started with args [%s], ORDERING_RELAY %s; want [relay], 1:\n%s", relay.args, relay.relay, out)
	}
	if api.args != "" || api.relay != "0" {
		t.Errorf("ordering started with args [%s], ORDERING_RELAY %s; want [], 0:\n%s", api.args, api.relay, out)
	}
	if storefront.relayPID != relay.pid {
		t.Errorf("storefront's STOREFRONT_RELAY_PID %s, want ordering-relay's pid %s:\n%s", storefront.relayPID, relay.pid, out)
	}
	for _, want := range []string{
		"ordering-relay | ordering amqp amqp://ordering:ordering-dev@localhost:5672/",
		"emailprovider  | emailprovider inventory-admin 1 provider-admin 1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run.sh output lacks %q:\n%s", want, out)
		}
	}

	pid, _ := strconv.Atoi(relay.pid)
	if pid <= 0 {
		t.Fatalf("no pid for ordering-relay:\n%s", out)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	interrupt(t, cmd, out, done)
	checkStopped(t, bin, out, "ordering", "ordering-relay", "emailprovider", "storefront")
}

// TestRunScriptGivesEachProcessOnlyTheSecretsItUses: make run hands each secret only to
// the process that uses it. The provider's list of keys goes to the provider alone, each
// caller's own key to that caller, the local superuser's URL to the services that own a
// database, never the storefront; and the storefront's key may read, and administer the
// provider's faults only with its demos on, never send.
func TestRunScriptGivesEachProcessOnlyTheSecretsItUses(t *testing.T) {
	t.Parallel()
	all := []string{"ordering", "inventory", "notification", "emailprovider", "storefront"}
	for _, demos := range []string{"0", "1"} {
		t.Run("STOREFRONT_DEMOS="+demos, func(t *testing.T) {
			t.Parallel()
			bin := t.TempDir()
			for _, name := range all {
				standIn(t, bin, name, "")
			}
			cmd, out, done := startRunScript(t, bin, "STOREFRONT_DEMOS="+demos)
			waitOutput(t, out, "running: ")
			for _, name := range all {
				waitOutput(t, out, fmt.Sprintf("%-14s | %s args", name, name))
			}
			interrupt(t, cmd, out, done)

			line := regexp.MustCompile(`(?m)^(\S+) +\| \S+ (admin|provider-keys) (\S+)(?: provider-key (\S+))?$`)
			admin, keys, key := map[string]string{}, map[string]string{}, map[string]string{}
			for _, m := range line.FindAllStringSubmatch(out.String(), -1) {
				if m[2] == "admin" {
					admin[m[1]] = m[3]
				} else {
					keys[m[1]], key[m[1]] = m[3], m[4]
				}
			}
			for _, name := range all {
				if name != "emailprovider" && keys[name] != "unset" {
					t.Errorf("%s holds the provider's list of keys: %s", name, keys[name])
				}
				if (name == "notification" || name == "storefront") == (key[name] == "unset") {
					t.Errorf("%s's EMAILPROVIDER_API_KEY: %s, want one for notification and the storefront only", name, key[name])
				}
				if (name == "storefront") != (admin[name] == "unset") {
					t.Errorf("%s's DATABASE_ADMIN_URL: %s, want one for every service with a database and none for the storefront", name, admin[name])
				}
			}
			storefrontScopes := "read"
			if demos == "1" {
				storefrontScopes = "read,admin"
			}
			want := "bookstore:" + key["notification"] + ":send,read,bookstore:" + key["storefront"] + ":" + storefrontScopes
			if keys["emailprovider"] != want {
				t.Errorf("the provider's EMAILPROVIDER_API_KEYS = %s, want %s", keys["emailprovider"], want)
			}
		})
	}
}

// managementDelete deletes what path names through the management API; a missing one is
// no error.
func managementDelete(t *testing.T, path string) {
	t.Helper()
	m := broker.Management{URL: testenv.ManagementURL()}
	if err := m.Do(context.Background(), http.MethodDelete, path, "", nil); err != nil && !errors.Is(err, broker.ErrNotFound) {
		t.Logf("%v", err)
	}
}

// TestRunScriptGivesTheServicesAVHostWithoutGuest: make run's services log in to a
// vhost of their own, where guest, whose password everyone knows, may do nothing, and
// whose administrator has a password made afresh for each run, printed for the user: as
// compose's broker has admin instead of guest.
func TestRunScriptGivesTheServicesAVHostWithoutGuest(t *testing.T) {
	t.Parallel()
	adminLine := regexp.MustCompile(`RabbitMQ management +http://localhost:15672 +\((\S+) / (\S+); vhost (\S+),`)
	run := func() (user, password, vhost string) {
		t.Helper()
		bin := t.TempDir()
		standIn(t, bin, "ordering", "")
		cmd, out, done := startRunScript(t, bin)
		waitOutput(t, out, "running: ordering")
		interrupt(t, cmd, out, done)
		m := adminLine.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("run.sh prints no administrator of the services' vhost:\n%s", out)
		}
		if !strings.Contains(out.String(), "ordering amqp amqp://ordering:ordering-dev@localhost:5672/"+m[3]+"\n") {
			t.Errorf("ordering does not log in to vhost %s:\n%s", m[3], out)
		}
		return m[1], m[2], m[3]
	}
	user, password, vhost := run()
	base, err := url.Parse(testenv.AMQPBase())
	if err != nil {
		t.Fatal(err)
	}
	dial := func(user, password string) error {
		u := *base
		u.User, u.Path = url.UserPassword(user, password), "/"+vhost
		conn, err := amqp.Dial(u.String())
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := dial("guest", "guest"); err == nil {
		t.Errorf("guest logs in to the services' vhost %s", vhost)
	}
	if err := dial(user, password); err != nil {
		t.Errorf("the printed administrator %s cannot log in to %s: %v", user, vhost, err)
	}
	if err := dial("ordering", "ordering-dev"); err != nil {
		t.Errorf("ordering cannot log in to %s: %v", vhost, err)
	}
	var perms []defPermission
	if err := json.Unmarshal(management(t, http.MethodGet, "/api/vhosts/"+url.PathEscape(vhost)+"/permissions", nil), &perms); err != nil {
		t.Fatal(err)
	}
	for _, p := range perms {
		if p.User == "guest" {
			t.Errorf("guest has permissions on %s: %+v", vhost, p)
		}
	}
	if _, second, _ := run(); second == password {
		t.Errorf("two runs printed the same administrator's password")
	}
}
