package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

const (
	composeFile      = "docker-compose.yml"
	composeChaosFile = "docker-compose.chaos.yml"
	chaosProfile     = "chaos"
	postgresInit     = "deploy/postgres/init/01-roles.sql"
	toxiproxyConfig  = "deploy/toxiproxy/toxiproxy.json"
)

// runtimeVariables are read by the Go runtime, not by the services' config table.
var runtimeVariables = []string{"GOMEMLIMIT", "GOMAXPROCS", "GODEBUG"}

// optionalDependencies may be down without a service failing: spans are dropped, not
// orders. Every other host a service's environment names is a hard dependency.
var optionalDependencies = []string{"jaeger"}

// loadCompose loads compose files as `docker compose` does (compose-go is its loader),
// with an empty environment so defaults such as ${LOG_LEVEL:-info} apply.
func loadCompose(t testing.TB, profiles []string, files ...string) *types.Project {
	t.Helper()
	return loadComposeEnv(t, nil, profiles, files...)
}

// loadComposeEnv is loadCompose with environ (NAME=value) as the shell's environment.
func loadComposeEnv(t testing.TB, environ, profiles []string, files ...string) *types.Project {
	t.Helper()
	root := repoRoot(t)
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.Join(root, f))
	}
	opts, err := cli.NewProjectOptions(paths,
		cli.WithWorkingDirectory(root),
		cli.WithEnv(append([]string{}, environ...)),
		cli.WithProfiles(profiles),
		cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("load %v: %v", files, err)
	}
	return p
}

func env(s types.ServiceConfig, name string) string {
	if v := s.Environment[name]; v != nil {
		return *v
	}
	return ""
}

func TestComposeEveryContainer(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, []string{chaosProfile}, composeFile)
	if len(p.DisabledServices) > 0 {
		t.Errorf("services disabled even with --profile %s: %v", chaosProfile, slices.Collect(keys(p.DisabledServices)))
	}
	for name, s := range p.Services {
		// Every container runs for as long as the system does: each needs a healthcheck,
		// or `depends_on: service_healthy` and `up --wait` cannot work.
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: no healthcheck", name)
		} else if len(s.HealthCheck.Test) < 2 || (s.HealthCheck.Test[0] != "CMD" && s.HealthCheck.Test[0] != "CMD-SHELL") {
			t.Errorf("%s: healthcheck test %v: want [CMD ...] or [CMD-SHELL ...]", name, s.HealthCheck.Test)
		}
		if s.MemLimit <= 0 && (s.Deploy == nil || s.Deploy.Resources.Limits == nil || s.Deploy.Resources.Limits.MemoryBytes <= 0) {
			t.Errorf("%s: no memory limit (mem_limit or deploy.resources.limits.memory)", name)
		}
		if s.Restart == "" || s.Restart == types.RestartPolicyNo {
			t.Errorf("%s: restart policy %q, want one that restarts a crashed container", name, s.Restart)
		}
		if s.Build == nil {
			if i := strings.LastIndex(s.Image, ":"); i < 0 || strings.Contains(s.Image[i:], "/") || strings.HasSuffix(s.Image, ":latest") {
				t.Errorf("%s: image %q is not pinned to a version tag", name, s.Image)
			}
		}
		// The short form of depends_on means service_started: the process forked, nothing
		// more. Waiting for healthy is what keeps services from crash-looping at boot.
		for dep, d := range s.DependsOn {
			target, ok := p.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			case d.Condition != types.ServiceConditionHealthy && d.Condition != types.ServiceConditionCompletedSuccessfully:
				t.Errorf("%s depends on %s with condition %q, want %s or %s", name, dep, d.Condition, types.ServiceConditionHealthy, types.ServiceConditionCompletedSuccessfully)
			case d.Condition == types.ServiceConditionHealthy && target.HealthCheck == nil:
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		// Every host named in the environment is a service waited for.
		for key, v := range s.Environment {
			if v == nil {
				continue
			}
			host := hostOf(*v)
			if _, isService := p.Services[host]; !isService || host == name || slices.Contains(optionalDependencies, host) {
				continue
			}
			if _, ok := s.DependsOn[host]; !ok {
				t.Errorf("%s: %s names %s, but %s does not depend_on it", name, key, host, name)
			}
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s: bind mount source: %v", name, err)
			}
		}
	}
}

// keys iterates over the keys of m.
func keys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// hostOf returns the host of a URL or host:port value, or "".
func hostOf(v string) string {
	if u, err := url.Parse(v); err == nil && u.Host != "" {
		return u.Hostname()
	}
	if host, _, err := net.SplitHostPort(v); err == nil {
		return host
	}
	return ""
}

func TestComposeServicesMatchContracts(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	p := loadCompose(t, nil, composeFile)
	stages := parseDockerfile(t, root).stageNames()
	rolePasswords := postgresInitRoles(t)
	rabbitUsers := definitionUsers(t)
	existing := existingServices(t)
	var binaries map[string]string
	if len(existing) > 0 {
		binaries = builtBinaries(t)
	}
	postgres := p.Services["postgres"]

	for _, c := range contractServices {
		t.Run(c.Name, func(t *testing.T) {
			s, ok := p.Services[c.Name]
			if !ok {
				t.Fatalf("no service %s in %s", c.Name, composeFile)
			}
			port := strconv.Itoa(c.Port)

			// Built from the one Dockerfile, with a target that exists in it.
			if s.Build == nil {
				t.Fatalf("no build section")
			}
			if got := filepath.Join(s.Build.Context, s.Build.Dockerfile); got != filepath.Join(root, dockerfilePath) {
				t.Errorf("build uses %s, want %s", got, dockerfilePath)
			}
			if !slices.Contains(stages, s.Build.Target) {
				t.Errorf("build target %q is not a stage of %s (%v)", s.Build.Target, dockerfilePath, stages)
			}
			if arg := s.Build.Args["SERVICE"]; arg == nil || *arg != c.Name {
				t.Errorf("build arg SERVICE = %v, want %s", arg, c.Name)
			}

			// The contract's port, published as itself, and probed through /readyz.
			if len(s.Ports) != 1 || s.Ports[0].Target != uint32(c.Port) || s.Ports[0].Published != port {
				t.Errorf("ports %+v, want exactly %s:%s", s.Ports, port, port)
			}
			if got := env(s, "HTTP_ADDR"); got != ":"+port {
				t.Errorf("HTTP_ADDR = %q, want :%s", got, port)
			}
			wantTest := []string{"CMD", "/healthcheck", "http://localhost:" + port + "/readyz"}
			if s.HealthCheck == nil || !slices.Equal(s.HealthCheck.Test, wantTest) {
				t.Errorf("healthcheck %v, want %v", s.HealthCheck, wantTest)
			}

			// The variables are the ones the binary reads: its --help table, or the
			// contracts' common ones while the service is not written yet.
			known := map[string]bool{}
			if bin, ok := binaries[c.Name]; ok {
				for name := range serviceVariables(t, bin) {
					known[name] = true
				}
			} else {
				t.Logf("services/%s/cmd/%s does not exist yet: checking against the common variables of docs/contracts.md only", c.Name, c.Name)
				for _, name := range append(commonVariables, "DATABASE_ADMIN_URL") {
					known[name] = true
				}
			}
			for name := range s.Environment {
				if !known[name] && !slices.Contains(runtimeVariables, name) {
					t.Errorf("environment sets %s, which %s does not read (a typo, or a variable removed from its --help)", name, c.Name)
				}
			}
			required := []string{"DATABASE_URL", "DATABASE_ADMIN_URL", "HTTP_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT", "LOG_LEVEL"}
			if known["AMQP_URL"] {
				required = append(required, "AMQP_URL")
			}
			for _, name := range required {
				if env(s, name) == "" {
					t.Errorf("environment lacks %s", name)
				}
			}
			if got := env(s, "OTEL_EXPORTER_OTLP_ENDPOINT"); got != "http://jaeger:4318" {
				t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT = %q, want http://jaeger:4318 (Jaeger's OTLP/HTTP)", got)
			}

			// Its own Postgres role, with the password the init script gives it.
			db, err := url.Parse(env(s, "DATABASE_URL"))
			if err != nil {
				t.Fatal(err)
			}
			pw, _ := db.User.Password()
			if db.User.Username() != c.Name || db.Path != "/"+c.Name || db.Host != "postgres:5432" {
				t.Errorf("DATABASE_URL %s: want role and database %s on postgres:5432", db.Redacted(), c.Name)
			}
			if want, ok := rolePasswords[c.Name]; !ok || pw != want {
				t.Errorf("DATABASE_URL password for %s does not match %s", c.Name, postgresInit)
			}
			admin, _ := url.Parse(env(s, "DATABASE_ADMIN_URL"))
			adminPW, _ := admin.User.Password()
			if admin.Host != "postgres:5432" || adminPW != env(postgres, "POSTGRES_PASSWORD") {
				t.Errorf("DATABASE_ADMIN_URL %s: want the postgres service's superuser and password", admin.Redacted())
			}

			// Its own RabbitMQ user, whose password matches the definitions file's hash.
			if known["AMQP_URL"] {
				amqpURL, _ := url.Parse(env(s, "AMQP_URL"))
				amqpPW, _ := amqpURL.User.Password()
				u, ok := rabbitUsers[amqpURL.User.Username()]
				switch {
				case amqpURL.User.Username() != c.Name || amqpURL.Host != "rabbitmq:5672":
					t.Errorf("AMQP_URL %s: want user %s on rabbitmq:5672", amqpURL.Redacted(), c.Name)
				case !ok:
					t.Errorf("AMQP_URL user %s is not in definitions.json", c.Name)
				case !u.hasPassword(amqpPW):
					t.Errorf("AMQP_URL password of %s does not match its password_hash in definitions.json", c.Name)
				}
			}
		})
	}

	// The links between services, as the contracts and the issue state them.
	for svc, want := range map[string]map[string]string{
		"notification":  {"EMAILPROVIDER_URL": "http://emailprovider:8084"},
		"emailprovider": {"SMTP_ADDR": "mailpit:1025"},
	} {
		for name, value := range want {
			if got := env(p.Services[svc], name); got != value {
				t.Errorf("%s: %s = %q, want %q", svc, name, got, value)
			}
		}
	}
}

// TestComposeStorefront checks the web page's container as TestComposeServicesMatchContracts
// checks the services': built from the one Dockerfile, its port published as itself and
// probed, every variable one its binary reads. It has no database and no broker user, it
// reaches each service at the service's contract port, and its break-it panel is off
// unless asked for.
func TestComposeStorefront(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	p := loadCompose(t, nil, composeFile)
	for _, c := range webServices {
		s, ok := p.Services[c.Name]
		if !ok {
			t.Fatalf("no service %s in %s", c.Name, composeFile)
		}
		port := strconv.Itoa(c.Port)
		if s.Build == nil {
			t.Fatalf("%s: no build section", c.Name)
		}
		if got := filepath.Join(s.Build.Context, s.Build.Dockerfile); got != filepath.Join(root, dockerfilePath) {
			t.Errorf("%s: build uses %s, want %s", c.Name, got, dockerfilePath)
		}
		if !slices.Contains(parseDockerfile(t, root).stageNames(), s.Build.Target) || s.Build.Target != "service" {
			t.Errorf("%s: build target %q, want the Dockerfile's stage service", c.Name, s.Build.Target)
		}
		if arg := s.Build.Args["SERVICE"]; arg == nil || *arg != c.Name {
			t.Errorf("%s: build arg SERVICE = %v, want %s", c.Name, arg, c.Name)
		}
		if len(s.Ports) != 1 || s.Ports[0].Target != uint32(c.Port) || s.Ports[0].Published != port || s.Ports[0].HostIP != "127.0.0.1" {
			t.Errorf("%s: ports %+v, want exactly 127.0.0.1:%s:%s", c.Name, s.Ports, port, port)
		}
		if got := env(s, "HTTP_ADDR"); got != ":"+port {
			t.Errorf("%s: HTTP_ADDR = %q, want :%s", c.Name, got, port)
		}
		wantTest := []string{"CMD", "/healthcheck", "http://localhost:" + port + "/readyz"}
		if s.HealthCheck == nil || !slices.Equal(s.HealthCheck.Test, wantTest) {
			t.Errorf("%s: healthcheck %v, want %v", c.Name, s.HealthCheck, wantTest)
		}
		if got := env(s, "OTEL_EXPORTER_OTLP_ENDPOINT"); got != "http://jaeger:4318" {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT = %q, want http://jaeger:4318", c.Name, got)
		}

		bin, ok := builtBinaries(t)[c.Name]
		if !ok {
			t.Fatalf("%s was not built", c.Name)
		}
		known := serviceVariables(t, bin)
		for name := range s.Environment {
			if _, ok := known[name]; !ok && !slices.Contains(runtimeVariables, name) {
				t.Errorf("%s: environment sets %s, which %s does not read", c.Name, name, c.Name)
			}
		}
		for _, name := range []string{"DATABASE_URL", "DATABASE_ADMIN_URL", "AMQP_URL"} {
			if _, ok := known[name]; ok {
				t.Errorf("%s reads %s: a web page reads the services' APIs, not their stores", c.Name, name)
			}
		}
		// Each service at its contract port, and waited for until healthy.
		for _, svc := range contractServices {
			name := strings.ToUpper(svc.Name) + "_URL"
			if got, want := env(s, name), fmt.Sprintf("http://%s:%d", svc.Name, svc.Port); got != want {
				t.Errorf("%s: %s = %q, want %q", c.Name, name, got, want)
			}
			if d, ok := s.DependsOn[svc.Name]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s does not wait for %s to be healthy", c.Name, svc.Name)
			}
		}
		if got := env(s, "JAEGER_URL"); got != "http://localhost:16686" {
			t.Errorf("%s: JAEGER_URL = %q, want Jaeger as the browser reaches it, http://localhost:16686", c.Name, got)
		}
		if got := env(s, "STOREFRONT_DEMOS"); got != "0" {
			t.Errorf("%s: STOREFRONT_DEMOS = %q by default, want 0", c.Name, got)
		}
		if got := env(loadComposeEnv(t, []string{"STOREFRONT_DEMOS=1"}, nil, composeFile).Services[c.Name], "STOREFRONT_DEMOS"); got != "1" {
			t.Errorf("%s: STOREFRONT_DEMOS = %q with STOREFRONT_DEMOS=1 make up, want 1", c.Name, got)
		}
	}
}

// TestComposeExposesNothingBeyondLoopback: least privilege, loopback by default. Every port
// compose publishes, with every profile and override, is bound to 127.0.0.1 (without a
// host address Docker binds all interfaces); the email provider's fault API is off unless
// asked for; Grafana's anonymous visitor may look, not administer.
func TestComposeExposesNothingBeyondLoopback(t *testing.T) {
	t.Parallel()
	for _, files := range [][]string{{composeFile}, {composeFile, composeChaosFile}} {
		p := loadCompose(t, []string{chaosProfile}, files...)
		published := 0
		for name, s := range p.Services {
			for _, port := range s.Ports {
				published++
				if port.HostIP != "127.0.0.1" {
					t.Errorf("%v: %s publishes %s:%d on host address %q, want \"127.0.0.1:%s:%d\"",
						files, name, port.Published, port.Target, port.HostIP, port.Published, port.Target)
				}
			}
		}
		if published == 0 {
			t.Errorf("%v: no published ports: the check above checked nothing", files)
		}
	}

	p := loadCompose(t, nil, composeFile)
	if got := env(p.Services["emailprovider"], "EMAILPROVIDER_ADMIN"); got != "0" {
		t.Errorf("emailprovider: EMAILPROVIDER_ADMIN = %q by default, want 0 (PUT /admin/faults off unless asked for)", got)
	}
	// How docs/docker.md turns it on for the fault demonstrations.
	asked := loadComposeEnv(t, []string{"EMAILPROVIDER_ADMIN=1"}, nil, composeFile)
	if got := env(asked.Services["emailprovider"], "EMAILPROVIDER_ADMIN"); got != "1" {
		t.Errorf("emailprovider: EMAILPROVIDER_ADMIN = %q with EMAILPROVIDER_ADMIN=1 make up, want 1", got)
	}
	// Catalogue writes likewise: off unless INVENTORY_ADMIN=1 make up.
	if got := env(p.Services["inventory"], "INVENTORY_ADMIN"); got != "0" {
		t.Errorf("inventory: INVENTORY_ADMIN = %q by default, want 0 (PUT /books/{id} off unless asked for)", got)
	}
	if got := env(loadComposeEnv(t, []string{"INVENTORY_ADMIN=1"}, nil, composeFile).Services["inventory"], "INVENTORY_ADMIN"); got != "1" {
		t.Errorf("inventory: INVENTORY_ADMIN = %q with INVENTORY_ADMIN=1 make up, want 1", got)
	}

	grafana := p.Services["grafana"]
	if env(grafana, "GF_AUTH_ANONYMOUS_ENABLED") == "true" {
		if role := env(grafana, "GF_AUTH_ANONYMOUS_ORG_ROLE"); role != "Viewer" {
			t.Errorf("grafana: anonymous visitors get the %q role, want Viewer", role)
		}
	}
}

// TestComposeChaosOverride checks that docker-compose.chaos.yml routes every link of
// every service through a Toxiproxy proxy whose upstream is the original address, and
// changes nothing else about the link.
func TestComposeChaosOverride(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	base := loadCompose(t, nil, composeFile)
	if _, ok := base.Services["toxiproxy"]; ok {
		t.Errorf("toxiproxy runs without --profile %s", chaosProfile)
	}
	chaos := loadCompose(t, []string{chaosProfile}, composeFile, composeChaosFile)
	toxiproxy, ok := chaos.Services["toxiproxy"]
	if !ok {
		t.Fatalf("no toxiproxy service with --profile %s", chaosProfile)
	}

	data, err := os.ReadFile(filepath.Join(root, toxiproxyConfig))
	if err != nil {
		t.Fatal(err)
	}
	var proxies []struct {
		Name, Listen, Upstream string
		Enabled                bool
	}
	if err := json.Unmarshal(data, &proxies); err != nil {
		t.Fatalf("%s: %v", toxiproxyConfig, err)
	}
	upstreamOf := map[string]string{} // toxiproxy:port -> upstream host:port
	for _, px := range proxies {
		_, port, err := net.SplitHostPort(px.Listen)
		if err != nil || !px.Enabled {
			t.Errorf("%s: proxy %s: listen %q enabled %v", toxiproxyConfig, px.Name, px.Listen, px.Enabled)
			continue
		}
		if _, ok := base.Services[hostOf(px.Upstream)]; !ok {
			t.Errorf("%s: proxy %s: upstream %s is not a compose service", toxiproxyConfig, px.Name, px.Upstream)
		}
		upstreamOf["toxiproxy:"+port] = px.Upstream
	}
	if !slices.ContainsFunc(toxiproxy.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Source == filepath.Join(root, toxiproxyConfig) && slices.Contains(toxiproxy.Command, "-config="+v.Target)
	}) {
		t.Errorf("toxiproxy does not load %s (volumes %v, command %v)", toxiproxyConfig, toxiproxy.Volumes, toxiproxy.Command)
	}

	routed := 0
	for _, c := range contractServices {
		before, after := base.Services[c.Name], chaos.Services[c.Name]
		if d, ok := after.DependsOn["toxiproxy"]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s does not wait for toxiproxy to be healthy", c.Name)
		}
		for _, key := range []string{"DATABASE_URL", "AMQP_URL", "EMAILPROVIDER_URL"} {
			was, now := env(before, key), env(after, key)
			if was == "" {
				continue
			}
			wasURL, _ := url.Parse(was)
			nowURL, _ := url.Parse(now)
			upstream, ok := upstreamOf[nowURL.Host]
			if !ok || upstream != wasURL.Host {
				t.Errorf("%s: %s = %s under chaos, want a toxiproxy port whose upstream is %s", c.Name, key, nowURL.Redacted(), wasURL.Host)
				continue
			}
			nowURL.Host = wasURL.Host
			if nowURL.String() != wasURL.String() {
				t.Errorf("%s: %s changes more than the host under chaos: %s vs %s", c.Name, key, nowURL.Redacted(), wasURL.Redacted())
			}
			routed++
		}
		for key := range before.Environment {
			// A service reached through toxiproxy answers to its name too (a Host of
			// another name is a 421), and to nothing else new.
			if key == "HTTP_HOSTS" && env(after, key) == env(before, key)+",toxiproxy" {
				continue
			}
			if key != "DATABASE_URL" && key != "AMQP_URL" && key != "EMAILPROVIDER_URL" && env(before, key) != env(after, key) {
				t.Errorf("%s: %s changes under chaos", c.Name, key)
			}
		}
	}
	if routed < 8 {
		t.Errorf("only %d links routed through toxiproxy", routed)
	}
}

// TestScriptsAreExecutable closes the "committed without its execute bit" failure: every
// shell script under deploy/, and every one the Makefile or compose refers to, must be
// executable on disk and, once tracked, in git's index.
func TestScriptsAreExecutable(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	scripts := map[string]bool{}
	_ = filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(path, ".sh") {
			rel, _ := filepath.Rel(root, path)
			scripts[rel] = true
		}
		return nil
	})
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`[\w./-]+\.sh\b`).FindAllString(string(makefile), -1) {
		scripts[strings.TrimPrefix(m, "./")] = true
	}
	for _, s := range loadCompose(t, []string{chaosProfile}, composeFile, composeChaosFile).Services {
		for _, v := range s.Volumes {
			if strings.HasSuffix(v.Source, ".sh") {
				rel, _ := filepath.Rel(root, v.Source)
				scripts[rel] = true
			}
		}
	}
	for _, must := range []string{"deploy/urls.sh", "deploy/local/run.sh"} {
		if !scripts[must] {
			t.Errorf("%s is not referenced or missing", must)
		}
	}
	index := gitModes(t, root)
	for s := range scripts {
		info, err := os.Stat(filepath.Join(root, s))
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if info.Mode().Perm()&0o111 != 0o111 {
			t.Errorf("%s: mode %v, want executable (chmod +x)", s, info.Mode().Perm())
		}
		if mode, tracked := index[s]; tracked && mode != "100755" {
			t.Errorf("%s: git index mode %s, want 100755 (git update-index --chmod=+x %s)", s, mode, s)
		}
	}
}

// gitModes returns the index mode of every tracked file, or nothing outside a git checkout.
func gitModes(t testing.TB, root string) map[string]string {
	out, err := exec.Command("git", "-C", root, "ls-files", "-s").Output()
	if err != nil {
		t.Logf("git ls-files: %v (checking modes on disk only)", err)
		return nil
	}
	modes := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		// 100755 <hash> 0\tdeploy/urls.sh
		meta, path, ok := strings.Cut(line, "\t")
		if ok {
			modes[path] = strings.Fields(meta)[0]
		}
	}
	return modes
}

var createRole = regexp.MustCompile(`(?m)^CREATE ROLE (\w+) LOGIN PASSWORD '([^']*)';$`)

// postgresInitRoles returns each role of the init script and its password.
func postgresInitRoles(t testing.TB) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), postgresInit))
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, m := range createRole.FindAllStringSubmatch(string(data), -1) {
		roles[m[1]] = m[2]
	}
	return roles
}

// TestPostgresInitScript runs the init script on the real Postgres, each role and
// database renamed to a fresh test name, then starts each service's database the way the
// service does (pgdb.Ensure). Both orders must work: the script on an empty volume, the
// services on every start, the second finding the first's work already done.
func TestPostgresInitScript(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), postgresInit))
	if err != nil {
		t.Fatal(err)
	}
	script := string(data)
	roles := postgresInitRoles(t)
	for _, c := range contractServices {
		if roles[c.Name] == "" {
			t.Errorf("%s creates no role with a password for %s", postgresInit, c.Name)
		}
		for _, stmt := range []string{"CREATE DATABASE " + c.Name + " OWNER " + c.Name + ";", "REVOKE ALL ON DATABASE " + c.Name + " FROM PUBLIC;"} {
			if !strings.Contains(script, stmt) {
				t.Errorf("%s lacks %q", postgresInit, stmt)
			}
		}
	}

	adminURL, _ := testenv.Database(t, "deploy") // skips or fails when Postgres is down
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := strings.ToLower(testenv.Name("t_init")) + "_"
	renamed := regexp.MustCompile(`\b(`+strings.Join(slices.Collect(keys(roles)), "|")+`)\b`).
		ReplaceAllStringFunc(stripSQLComments(script), func(name string) string { return prefix + name })
	t.Cleanup(func() {
		for role := range roles {
			testenv.DropDatabase(t, prefix+role)
		}
	})
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// One statement at a time, as psql runs the file: CREATE DATABASE cannot run inside
	// the implicit transaction of a multi-statement query.
	for _, stmt := range strings.Split(renamed, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s on Postgres: %s: %v", postgresInit, strings.TrimSpace(stmt), err)
		}
	}
	// The script's bounds on each role are pgdb's: the same sessions are bounded whether
	// the script or a service's start made the role.
	roleSettings := func(role string) map[string]string {
		got := map[string]string{}
		rows, err := conn.Query(ctx, `SELECT split_part(c, '=', 1), split_part(c, '=', 2)
			FROM pg_db_role_setting s, unnest(s.setconfig) c
			WHERE s.setrole = $1::regrole AND s.setdatabase = 0`, prefix+role)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name, value string
			if err := rows.Scan(&name, &value); err != nil {
				t.Fatal(err)
			}
			got[name] = value
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for role := range roles {
		if got := roleSettings(role); !maps.Equal(got, pgdb.RoleSettings) {
			t.Errorf("%s sets %v on role %s, want pgdb.RoleSettings %v", postgresInit, got, role, pgdb.RoleSettings)
		}
	}
	for role, pw := range roles {
		u, _ := url.Parse(adminURL)
		u.User = url.UserPassword(prefix+role, pw)
		u.Path = "/" + prefix + role
		if err := pgdb.Ensure(ctx, adminURL, u.String()); err != nil {
			t.Errorf("service start after the init script (%s): %v", role, err)
		}
		var owner string
		if err := conn.QueryRow(ctx, `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1`, prefix+role).Scan(&owner); err != nil || owner != prefix+role {
			t.Errorf("database %s owned by %q (%v), want its own role", prefix+role, owner, err)
		}
		if got := roleSettings(role); !maps.Equal(got, pgdb.RoleSettings) {
			t.Errorf("role %s carries %v after a service's start, want pgdb.RoleSettings %v", prefix+role, got, pgdb.RoleSettings)
		}
	}
}

func stripSQLComments(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func TestURLsScriptPrintsEveryPublishedUI(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(filepath.Join(repoRoot(t), "deploy", "urls.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/urls.sh: %v\n%s", err, out)
	}
	p := loadCompose(t, []string{chaosProfile}, composeFile)
	// Every port compose publishes for a browser or an API is printed, and nothing else.
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if slices.Contains([]uint32{5432, 5672, 4317, 4318}, port.Target) {
				continue // database and broker wire ports, OTLP: not something to open
			}
			if !strings.Contains(string(out), fmt.Sprintf("http://localhost:%s", port.Published)) {
				t.Errorf("deploy/urls.sh does not print %s's port %s", name, port.Published)
			}
		}
	}
	for _, m := range regexp.MustCompile(`localhost:(\d+)`).FindAllStringSubmatch(string(out), -1) {
		found := false
		for _, s := range p.Services {
			for _, port := range s.Ports {
				found = found || port.Published == m[1]
			}
		}
		if !found {
			t.Errorf("deploy/urls.sh prints port %s, which compose does not publish", m[1])
		}
	}
}

// TestComposeGivesTheStorefrontsProviderKeyReadOnly: at the provider, notification's key
// may send and read, the storefront's only read, and administer the faults only when
// STOREFRONT_DEMOS asks for its panel; the k8s local overlay lists the same scopes.
func TestComposeGivesTheStorefrontsProviderKeyReadOnly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		environ          []string
		storefrontScopes string
	}{{nil, "read"}, {[]string{"STOREFRONT_DEMOS=1", "EMAILPROVIDER_ADMIN=1"}, "read,admin"}} {
		p := loadComposeEnv(t, c.environ, nil, composeFile)
		want := "bookstore:" + env(p.Services["notification"], "EMAILPROVIDER_API_KEY") + ":send,read," +
			"bookstore:" + env(p.Services["storefront"], "EMAILPROVIDER_API_KEY") + ":" + c.storefrontScopes
		if got := env(p.Services["emailprovider"], "EMAILPROVIDER_API_KEYS"); got != want {
			t.Errorf("%v: the provider's EMAILPROVIDER_API_KEYS = %q, want %q", c.environ, got, want)
		}
	}
	overlay, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "k8s", "overlays", "local", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "keys=bookstore:notification-dev-key-0123456789abcd:send,read,bookstore:storefront-dev-key-0123456789abcdef:read\n"; !strings.Contains(string(overlay), want) {
		t.Errorf("the k8s local overlay's emailprovider-api-keys lacks %q", want)
	}
}

// TestComposeRotatesEveryContainersLog: a client that makes a service log what it
// refuses, or a container that logs in a loop, cannot fill the disk: every container's
// log is rotated, a few files of a few MB each.
func TestComposeRotatesEveryContainersLog(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, []string{"*"}, composeFile)
	for name, s := range p.Services {
		l := s.Logging
		if l == nil || l.Driver != "json-file" || l.Options["max-size"] == "" || l.Options["max-file"] == "" {
			t.Errorf("%s: logging %+v, want json-file with max-size and max-file", name, l)
		}
	}
}
