package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/api/apitest"
	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
)

// contractService is one row of the services table of docs/contracts.md.
type contractService struct {
	Name string
	Port int
}

// contractServices is the services table of docs/contracts.md. TestContractsServicesTableMatchesTheChecks
// compares it with the file itself, so this copy cannot drift.
var contractServices = []contractService{
	{"ordering", 8081},
	{"inventory", 8082},
	{"notification", 8083},
	{"emailprovider", 8084},
}

// webServices are the services that serve a web page rather than an API of the
// contracts: no database, no broker, no row in the services table. The Dockerfile builds
// them as it builds the others.
var webServices = []contractService{{"storefront", 8080}}

// commonVariables are the "Common variables" of docs/contracts.md that every service with
// a broker reads.
var commonVariables = []string{"DATABASE_URL", "AMQP_URL", "HTTP_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT", "LOG_LEVEL", "BOOKSTORE_FAILPOINTS"}

// repoRoot is the directory holding go.work.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test's directory")
		}
		dir = parent
	}
}

// existingServices are the services whose main package exists in this checkout. Services
// are written in parallel by several engineers; the checks that need a binary run for
// each one that exists.
func existingServices(t testing.TB) []string {
	t.Helper()
	root := repoRoot(t)
	var out []string
	for _, s := range contractServices {
		if _, err := os.Stat(filepath.Join(root, "services", s.Name, "cmd", s.Name)); err == nil {
			out = append(out, s.Name)
		}
	}
	return out
}

// existingWebServices are the web services whose main package exists in this checkout.
func existingWebServices(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, s := range webServices {
		if _, err := os.Stat(filepath.Join(repoRoot(t), "services", s.Name, "cmd", s.Name)); err == nil {
			out = append(out, s.Name)
		}
	}
	return out
}

func TestContractsServicesTableMatchesTheChecks(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "contracts.md"))
	if err != nil {
		t.Fatal(err)
	}
	// | ordering | 8081 | `ordering` | takes orders; ...
	row := regexp.MustCompile("(?m)^\\| (\\w+) \\| (\\d+) \\| `(\\w+)` \\|")
	var got []contractService
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		port, _ := strconv.Atoi(m[2])
		got = append(got, contractService{m[1], port})
		if m[1] != m[3] {
			t.Errorf("docs/contracts.md: service %s owns database %s; the checks here assume they are named alike", m[1], m[3])
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(contractServices) {
		t.Errorf("docs/contracts.md services table = %v, the tests here assume %v", got, contractServices)
	}
	common := regexp.MustCompile("Common variables: (.*)").FindStringSubmatch(strings.ReplaceAll(string(data), "\n", " "))
	if common == nil {
		t.Fatal("docs/contracts.md: no 'Common variables:' sentence")
	}
	for _, v := range commonVariables {
		if !strings.Contains(common[1], "`"+v+"`") {
			t.Errorf("docs/contracts.md's common variables do not name %s", v)
		}
	}
}

// helpVariable is one row of a binary's --help table.
type helpVariable struct {
	Name, Default string
}

// parseHelp reads the table config.Parse prints for --help:
//
//	VARIABLE      DEFAULT   MEANING
//	DATABASE_URL  postgres://...  the service's own database ...
//
// Columns are found by the header's offsets, since a default may be empty.
func parseHelp(out []byte) (map[string]helpVariable, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	vars := map[string]helpVariable{}
	defaultAt, meaningAt := -1, -1
	for sc.Scan() {
		line := sc.Text()
		if defaultAt < 0 {
			if strings.HasPrefix(line, "VARIABLE") {
				defaultAt, meaningAt = strings.Index(line, "DEFAULT"), strings.Index(line, "MEANING")
			}
			continue
		}
		if strings.TrimSpace(line) == "" || len(line) < meaningAt {
			continue
		}
		v := helpVariable{
			Name:    strings.TrimSpace(line[:defaultAt]),
			Default: strings.TrimSpace(line[defaultAt:meaningAt]),
		}
		vars[v.Name] = v
	}
	if defaultAt < 0 || meaningAt < 0 || len(vars) == 0 {
		return nil, fmt.Errorf("no VARIABLE/DEFAULT/MEANING table in:\n%s", out)
	}
	return vars, nil
}

// serviceVariables runs a service binary with --help and returns its variable table.
func serviceVariables(t testing.TB, binary string) map[string]helpVariable {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", binary, err, out)
	}
	vars, err := parseHelp(out)
	if err != nil {
		t.Fatalf("%s --help: %v", binary, err)
	}
	return vars
}

// Binaries are built once per test run, with the Dockerfile's own build lines, and
// shared by every test that needs them.
var built struct {
	once     sync.Once
	dir      string
	binaries map[string]string // service name (or "healthcheck") -> path
	err      error
}

// builtBinaries returns the binaries the Dockerfile builds, compiled here exactly as the
// image build compiles them (dockerfile_test.go). It fails the test if any build fails.
func builtBinaries(t testing.TB) map[string]string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "bookstore-deploy-bin-")
		if built.err != nil {
			return
		}
		built.binaries, built.err = buildLikeTheDockerfile(repoRoot(t), built.dir, append(existingServices(t), existingWebServices(t)...))
	})
	if built.err != nil {
		t.Fatalf("building like the Dockerfile: %v", built.err)
	}
	return built.binaries
}

// sut is the system under test, as testenv's helpers see it.
var sut = testenv.System{
	Topology:  contracts.Topology, // what testenv's helpers declare and publish to
	Contracts: apitest.Checker{},  // every request, response and event against api/
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
