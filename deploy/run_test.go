package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/testenv"
)

// The tests of deploy/local/run.sh run it on stand-in service processes: the real
// services listen on the fixed ports 8081-8084, which a test must not take on a machine
// where other people run the system. What is under test is the script's supervision:
// prefixes, skipping what is not built, stopping everything on SIGTERM or when one exits.
// (The script with the real binaries: `make run`.)

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
echo "` + name + ` inventory-admin ${INVENTORY_ADMIN-unset}"
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
// and AMQP_URL of the test's own environment, with extraEnv.
func startRunScript(t *testing.T, binDir string, extraEnv ...string) (*exec.Cmd, *syncBuffer, chan error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "deploy", "local", "run.sh"))
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_ADMIN_URL=") && !strings.HasPrefix(kv, "AMQP_URL=") {
			environ = append(environ, kv)
		}
	}
	cmd.Env = append(environ, "BIN_DIR="+binDir, "READY_TIMEOUT=1", "LOG_LEVEL=debug")
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

func TestRunScriptStopsEverythingOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	standIn(t, bin, "ordering", "")
	standIn(t, bin, "emailprovider", "")
	cmd, out, done := startRunScript(t, bin)

	waitOutput(t, out, "running: ordering emailprovider")
	for _, want := range []string{
		"ordering       | ordering started with LOG_LEVEL=debug", // prefixed, environment passed on
		"emailprovider  | emailprovider started",
		"inventory: " + bin + "/inventory is not built yet, skipping it",
		"notification: " + bin + "/notification is not built yet, skipping it",
		"http://localhost:8081/orders",
		// make run gives the services the local superuser, whose own default is none.
		"ordering       | ordering admin postgres://postgres@localhost:5432/postgres?sslmode=disable",
		// and INVENTORY_ADMIN=1 (read by inventory alone): PUT /books/{id} works on loopback.
		"ordering       | ordering inventory-admin 1",
	} {
		waitOutput(t, out, want)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code := cmd.ProcessState.ExitCode(); code != 143 {
			t.Errorf("run.sh exited with %d (%v) after SIGTERM, want 143", code, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run.sh did not stop after SIGTERM:\n%s", out)
	}
	for _, name := range []string{"ordering", "emailprovider"} {
		if _, err := os.Stat(filepath.Join(bin, name+".stopped")); err != nil {
			t.Errorf("%s was not stopped with SIGTERM: %v\n%s", name, err, out)
		}
	}
}

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
	for _, want := range []string{"notification   | notification failing", "notification exited with status 3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run.sh output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "ordering.stopped")); err != nil {
		t.Errorf("ordering was left running when notification exited: %v", err)
	}
}

func TestRunScriptWithNothingBuilt(t *testing.T) {
	t.Parallel()
	cmd, out, done := startRunScript(t, t.TempDir())
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run.sh kept running with no binaries")
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(out.String(), "run make build") {
		t.Errorf("exit %d, output:\n%s\nwant 1 and a hint to run make build", code, out)
	}
}

// brokerServices are the services with a broker user; the email provider has none.
var brokerServices = []string{"ordering", "inventory", "notification"}

// runScriptAMQPURLs runs run.sh on stand-ins of all four services with extraEnv and
// returns the AMQP_URL each was started with ("unset" when it had none).
func runScriptAMQPURLs(t *testing.T, extraEnv ...string) map[string]string {
	t.Helper()
	bin := t.TempDir()
	all := append(slices.Clone(brokerServices), "emailprovider")
	for _, name := range all {
		standIn(t, bin, name, "")
	}
	cmd, out, done := startRunScript(t, bin, extraEnv...)
	waitOutput(t, out, "running: ordering inventory notification emailprovider")
	urls := map[string]string{}
	for _, name := range all {
		prefix := fmt.Sprintf("%-14s | %s amqp ", name, name)
		waitOutput(t, out, prefix)
		for _, line := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				urls[name] = v
			}
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run.sh did not stop after SIGTERM:\n%s", out)
	}
	return urls
}

// TestRunScriptLogsEachServiceInAsItsOwnUser: make run gives ordering, inventory and
// notification each its own broker user, with the password docker-compose.yml gives it
// and definitions.json's hash accepts, and the email provider no AMQP_URL; an AMQP_URL
// the caller sets goes to all of them instead.
func TestRunScriptLogsEachServiceInAsItsOwnUser(t *testing.T) {
	t.Parallel()
	users := definitionUsers(t)
	compose := loadCompose(t, nil, composeFile)
	urls := runScriptAMQPURLs(t)
	for _, name := range brokerServices {
		u, err := url.Parse(urls[name])
		if err != nil {
			t.Errorf("%s: AMQP_URL %q: %v", name, urls[name], err)
			continue
		}
		pw, _ := u.User.Password()
		composeURL, _ := url.Parse(env(compose.Services[name], "AMQP_URL"))
		composePW, _ := composeURL.User.Password()
		switch {
		case u.Scheme != "amqp" || u.Host != "localhost:5672" || u.Path != "/" || u.User.Username() != name:
			t.Errorf("%s: AMQP_URL %s, want user %s on localhost:5672, vhost /", name, u.Redacted(), name)
		case !users[name].hasPassword(pw):
			t.Errorf("%s: AMQP_URL password does not match its password_hash in %s", name, definitionsFile)
		case pw != composePW:
			t.Errorf("%s: AMQP_URL password differs from docker-compose.yml's", name)
		}
	}
	if urls["emailprovider"] != "unset" {
		t.Errorf("emailprovider started with AMQP_URL %q, want none", urls["emailprovider"])
	}

	const mine = "amqp://guest:guest@localhost:5672/mine"
	for name, got := range runScriptAMQPURLs(t, "AMQP_URL="+mine) {
		if got != mine {
			t.Errorf("%s: AMQP_URL %q with the caller's AMQP_URL=%s, want the caller's", name, got, mine)
		}
	}
}

// TestLocalBrokerUsers runs deploy/local/rabbitmq-users.sh (services.sh's last step)
// twice on the local broker and checks that each service user then has exactly the
// permissions and topic permissions definitions.json gives it on "/", that guest is
// untouched, and that a connection made with the AMQP_URL run.sh gives a service is that
// service's user, as the management API sees it.
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
		if name == "emailprovider" {
			continue
		}
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
		wantUser[connName] = name + " on /"
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

// TestRunScriptStartsTheStorefrontFirstInItsURLs: make run starts the storefront beside
// the services, without a broker user, prints its URL before any other, and with
// STOREFRONT_DEMOS=1 lets the provider take the panel's fault changes.
func TestRunScriptStartsTheStorefrontFirstInItsURLs(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	for _, name := range []string{"emailprovider", "storefront"} {
		standIn(t, bin, name, "")
		// The stand-in also shows the provider's admin switch and the demos variable.
		script, _ := os.ReadFile(filepath.Join(bin, name))
		script = bytes.Replace(script, []byte("trap "), []byte(`echo "`+name+` provider-admin ${EMAILPROVIDER_ADMIN-unset} demos ${STOREFRONT_DEMOS-unset}"`+"\ntrap "), 1)
		if err := os.WriteFile(filepath.Join(bin, name), script, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd, out, done := startRunScript(t, bin, "STOREFRONT_DEMOS=1")
	waitOutput(t, out, "running: emailprovider storefront")
	for _, want := range []string{
		"storefront     | storefront started",
		"storefront     | storefront amqp unset",
		"emailprovider  | emailprovider provider-admin 1 demos 1",
	} {
		waitOutput(t, out, want)
	}
	first := regexp.MustCompile(`https?://localhost:\d+`).FindString(out.String())
	if first != "http://localhost:8080" {
		t.Errorf("the first URL run.sh prints is %q, want the storefront's http://localhost:8080:\n%s", first, out)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run.sh did not stop after SIGTERM:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(bin, "storefront.stopped")); err != nil {
		t.Errorf("storefront was not stopped with SIGTERM: %v", err)
	}
}

// TestRunScriptRunsTheRelayApartWithDemos: with STOREFRONT_DEMOS=1, make run starts
// ordering with ORDERING_RELAY=0 and `ordering relay` beside it as ordering-relay, as
// ordering's broker user, and gives the storefront that process's pid, which the panel
// pauses with SIGSTOP; a relay left stopped is still stopped with SIGTERM at the end.
// Without demos nothing of it: ordering runs its relay inside, and the storefront has
// no pid.
func TestRunScriptRunsTheRelayApartWithDemos(t *testing.T) {
	t.Parallel()
	line := regexp.MustCompile(`(?m)^(\S+) +\| \S+ args \[(.*)\] pid (\d+) ORDERING_RELAY=(\S+) STOREFRONT_RELAY_PID=(\S+)$`)
	type started struct{ args, pid, relay, relayPID string }
	run := func(t *testing.T, demos string) (map[string]started, string) {
		bin := t.TempDir()
		for _, name := range []string{"ordering", "storefront"} {
			standIn(t, bin, name, "")
		}
		cmd, out, done := startRunScript(t, bin, "STOREFRONT_DEMOS="+demos)
		want := "running: ordering storefront"
		if demos == "1" {
			want = "running: ordering ordering-relay storefront"
		}
		waitOutput(t, out, want)
		waitOutput(t, out, "storefront     | storefront args")
		waitOutput(t, out, "ordering       | ordering args")
		if demos == "1" {
			waitOutput(t, out, "ordering-relay | ordering args")
		}
		got := map[string]started{}
		for _, m := range line.FindAllStringSubmatch(out.String(), -1) {
			got[m[1]] = started{m[2], m[3], m[4], m[5]}
		}
		if demos == "1" {
			// The panel's pause: the relay stopped when make run is stopped.
			pid, _ := strconv.Atoi(got["ordering-relay"].pid)
			if pid <= 0 {
				t.Fatalf("no pid for ordering-relay:\n%s", out)
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("run.sh did not stop after SIGTERM:\n%s", out)
		}
		stopped := []string{"ordering", "storefront"}
		if demos == "1" {
			stopped = append(stopped, "ordering-relay")
		}
		for _, name := range stopped {
			if _, err := os.Stat(filepath.Join(bin, name+".stopped")); err != nil {
				t.Errorf("%s was not stopped with SIGTERM: %v\n%s", name, err, out)
			}
		}
		return got, out.String()
	}

	got, out := run(t, "1")
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
	if !strings.Contains(out, "ordering-relay | ordering amqp amqp://ordering:ordering-dev@localhost:5672/") {
		t.Errorf("ordering-relay does not log in as ordering's broker user:\n%s", out)
	}

	got, out = run(t, "0")
	if _, ok := got["ordering-relay"]; ok || got["ordering"].relay != "unset" || got["storefront"].relayPID != "unset" {
		t.Errorf("without demos: %+v, want no ordering-relay, no ORDERING_RELAY, no STOREFRONT_RELAY_PID:\n%s", got, out)
	}
}
