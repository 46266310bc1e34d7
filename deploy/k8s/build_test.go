package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// object is one object an overlay builds: its identity, its JSON, and for the built-in
// kinds the typed value it decoded strictly into.
type object struct {
	APIVersion, Kind, Name string
	JSON                   []byte
	Typed                  any
}

// built is an overlay as `kubectl apply -k` would send it.
type built struct {
	Dir     string
	Objects []object
}

// builtin are the kinds an overlay may hold besides the operators' custom resources,
// each decoded strictly into its k8s.io/api type.
var builtin = map[string]func() any{
	"v1/Namespace":                  func() any { return new(corev1.Namespace) },
	"v1/Service":                    func() any { return new(corev1.Service) },
	"v1/ConfigMap":                  func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                     func() any { return new(corev1.Secret) },
	"apps/v1/Deployment":            func() any { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":           func() any { return new(appsv1.StatefulSet) },
	"policy/v1/PodDisruptionBudget": func() any { return new(policyv1.PodDisruptionBudget) },
}

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
			t.Fatal("no go.work above the working directory")
		}
		dir = parent
	}
}

// build runs kustomize on dir (relative to deploy/k8s) with the options `kubectl
// apply -k` uses (files only from inside the kustomization's root), and decodes every
// object it emits: built-in kinds strictly into k8s.io/api types (an unknown or
// misspelt field fails), custom resources against their CRD.
func build(t testing.TB, dir string) built {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	schemas := loadCRDs(t)
	b := built{Dir: dir}
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		o := object{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Name: r.GetName(), JSON: j}
		id := fmt.Sprintf("%s: %s %s", dir, o.Kind, o.Name)
		if newT, ok := builtin[o.APIVersion+"/"+o.Kind]; ok {
			o.Typed = newT()
			d := json.NewDecoder(bytes.NewReader(j))
			d.DisallowUnknownFields()
			if err := d.Decode(o.Typed); err != nil {
				t.Errorf("%s does not decode strictly into %T: %v", id, o.Typed, err)
			}
		} else {
			for _, e := range validateCR(schemas, o.APIVersion, o.Kind, j) {
				t.Errorf("%s (%s) against its CRD: %s", id, o.APIVersion, e)
			}
		}
		b.Objects = append(b.Objects, o)
	}
	return b
}

func (b built) all(kind string) []object {
	var out []object
	for _, o := range b.Objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (b built) get(kind, name string) (object, bool) {
	for _, o := range b.Objects {
		if o.Kind == kind && o.Name == name {
			return o, true
		}
	}
	return object{}, false
}

// fields decodes a custom resource's JSON loosely, for the checks that read it.
func (o object) fields(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(o.JSON, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// dig follows keys through nested maps.
func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// contractPorts reads docs/contracts.md's service name to port: the services table's four
// rows, and each of webServices from the sentence that introduces it beside the table
// ("the **storefront** (port 8080, ...").
func contractPorts(t testing.TB) map[string]int32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "contracts.md"))
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int32{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\w+) \| (80\d\d) \|`).FindAllStringSubmatch(string(b), -1) {
		var p int32
		fmt.Sscan(m[2], &p)
		ports[m[1]] = p
	}
	if len(ports) != 4 {
		t.Fatalf("docs/contracts.md's services table: want 4 services with ports, have %v", ports)
	}
	for _, w := range webServices {
		m := regexp.MustCompile(`\*\*` + w + `\*\* \(port (80\d\d),`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("docs/contracts.md: no \"**%s** (port 80xx,\" beside the services table", w)
		}
		var p int32
		fmt.Sscan(string(m[1]), &p)
		ports[w] = p
	}
	return ports
}

// contractQueues reads the queues table of docs/contracts.md: consumer to queue (the
// queue's name starts with its consumer's).
func contractQueues(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "contracts.md"))
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `((\\w+)\\.[\\w.-]+)` \\| `").FindAllStringSubmatch(string(b), -1) {
		queues[m[2]] = m[1]
	}
	if len(queues) != 3 {
		t.Fatalf("docs/contracts.md's queues table: want 3 queues, have %v", queues)
	}
	return queues
}

var (
	helpOnce sync.Once
	helpVars map[string]map[string]bool
	helpErr  error
)

// serviceVariables builds the binaries of docs/contracts.md's services and web pages
// (contractPorts) as the Dockerfile does (CGO_ENABLED=0) and reads the variables each
// prints in its --help table.
func serviceVariables(t testing.TB) map[string]map[string]bool {
	t.Helper()
	root := repoRoot(t)
	ports := contractPorts(t) // outside Do: its t.Fatal must not end the Do of another test
	helpOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bookstore-k8s-test-")
		if err != nil {
			helpErr = err
			return
		}
		defer os.RemoveAll(dir)
		services := slices.Sorted(maps.Keys(ports))
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		for _, s := range services {
			args = append(args, "./services/"+s+"/cmd/"+s)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helpErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		helpVars = map[string]map[string]bool{}
		for _, s := range services {
			out, err := exec.Command(filepath.Join(dir, s), "--help").CombinedOutput()
			if err != nil {
				helpErr = fmt.Errorf("%s --help: %v\n%s", s, err, out)
				return
			}
			vars := map[string]bool{}
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) > 0 && regexp.MustCompile(`^[A-Z][A-Z0-9_]+$`).MatchString(f[0]) && f[0] != "VARIABLE" {
					vars[f[0]] = true
				}
			}
			// A service owns a database (docs/contracts.md); a web page has none.
			if !vars["HTTP_ADDR"] || vars["DATABASE_URL"] == slices.Contains(webServices, s) {
				helpErr = fmt.Errorf("%s --help: HTTP_ADDR %v, DATABASE_URL %v; want HTTP_ADDR, and DATABASE_URL unless a web page:\n%s", s, vars["HTTP_ADDR"], vars["DATABASE_URL"], out)
				return
			}
			helpVars[s] = vars
		}
	})
	if helpErr != nil {
		t.Fatal(helpErr)
	}
	return helpVars
}

// compose is the part of docker-compose.yml these checks compare with.
type compose struct {
	Services map[string]struct {
		Image           string            `json:"image"`
		Environment     map[string]string `json:"environment"`
		MemLimit        string            `json:"mem_limit"`
		StopGracePeriod string            `json:"stop_grace_period"`
		Volumes         []string          `json:"volumes"` // short syntax: source:target[:mode]
		Build           struct {
			Target string            `json:"target"`
			Args   map[string]string `json:"args"`
		} `json:"build"`
	} `json:"services"`
}

// loadCompose reads docker-compose.yml (YAML anchors and merge keys resolved) with every
// ${NAME:-default} at its default, as `docker compose` with an empty environment.
func loadCompose(t testing.TB) compose {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`\$\{\w+:-([^}]*)\}`).ReplaceAll(b, []byte("$1"))
	// ${VAR:+alternative} is empty with VAR unset, as compose's defaults are read here.
	b = regexp.MustCompile(`\$\{\w+:\+[^}]*\}`).ReplaceAll(b, nil)
	var c compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return c
}
