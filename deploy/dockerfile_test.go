package deploy

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	shellwords "github.com/mattn/go-shellwords"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

const dockerfilePath = "deploy/Dockerfile"

// The stage names compose builds (--target) and the one the go build lines run in.
const (
	buildStage   = "build"
	serviceStage = "service"
)

// dockerfile is deploy/Dockerfile as BuildKit parses it.
type dockerfile struct {
	stages   []instructions.Stage
	lintWarn []string
}

// parseDockerfile parses with BuildKit's own parser and runs its linter (the checks of
// `docker build --check`), so a syntax error or a lint warning shows up without Docker.
func parseDockerfile(t testing.TB, root string) dockerfile {
	t.Helper()
	var warnings []string
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		warnings = append(warnings, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
	}})
	d, err := readDockerfile(root, lint)
	if err != nil {
		t.Fatalf("%s: %v", dockerfilePath, err)
	}
	d.lintWarn = warnings
	return d
}

func readDockerfile(root string, lint *linter.Linter) (dockerfile, error) {
	var d dockerfile
	f, err := os.Open(filepath.Join(root, dockerfilePath))
	if err != nil {
		return d, err
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		return d, err
	}
	d.stages, _, err = instructions.Parse(res.AST, lint)
	return d, err
}

func (d dockerfile) stage(name string) (instructions.Stage, bool) {
	for _, s := range d.stages {
		if s.Name == name {
			return s, true
		}
	}
	return instructions.Stage{}, false
}

func (d dockerfile) stageNames() []string {
	var out []string
	for _, s := range d.stages {
		out = append(out, s.Name)
	}
	return out
}

// goBuild is one `go build` line of the build stage.
type goBuild struct {
	line string // as written, for messages
}

// goBuilds returns the RUN lines of the build stage that run go build. Each must be one
// simple command (no &&, ;, | or subshell) so that this test runs exactly what the image
// build runs.
func (d dockerfile) goBuilds() ([]goBuild, error) {
	s, ok := d.stage(buildStage)
	if !ok {
		return nil, fmt.Errorf("no stage named %q in %s", buildStage, dockerfilePath)
	}
	var out []goBuild
	for _, c := range s.Commands {
		run, ok := c.(*instructions.RunCommand)
		if !ok || !run.PrependShell || len(run.CmdLine) != 1 || !strings.Contains(run.CmdLine[0], "go build") {
			continue
		}
		line := strings.TrimSpace(run.CmdLine[0])
		if strings.ContainsAny(line, ";|&`()") {
			return nil, fmt.Errorf("%s: keep each go build a single command, so the deploy test can run it: %s", dockerfilePath, line)
		}
		out = append(out, goBuild{line: line})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no go build line in stage %q", dockerfilePath, buildStage)
	}
	return out, nil
}

// command expands the line's ${VARS} from vars (an unknown one is an error, so a new
// build argument cannot be silently empty here) and splits it the way sh would.
func (b goBuild) command(vars map[string]string) (env, args []string, output string, err error) {
	var unknown []string
	expanded := os.Expand(b.line, func(name string) string {
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, name)
		}
		return v
	})
	if len(unknown) > 0 {
		return nil, nil, "", fmt.Errorf("%s: variables %v of %q are not known to the test", dockerfilePath, unknown, b.line)
	}
	words, err := shellwords.Parse(expanded)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %q: %w", dockerfilePath, b.line, err)
	}
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		env, words = append(env, words[0]), words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		return nil, nil, "", fmt.Errorf("%s: %q is not `[VAR=value...] go build ...`", dockerfilePath, b.line)
	}
	args = words[1:]
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			output = args[i+1]
		}
	}
	if output == "" {
		return nil, nil, "", fmt.Errorf("%s: %q has no -o", dockerfilePath, b.line)
	}
	return env, args, output, nil
}

// buildLikeTheDockerfile runs the build stage's go build lines for every service, in a
// copy of the Docker build context (the repository less .dockerignore), with the same
// environment and flags; outputs land in outDir instead of /out. It returns the path of
// each binary by service name, and "healthcheck".
func buildLikeTheDockerfile(root, outDir string, services []string) (map[string]string, error) {
	ctxDir := filepath.Join(outDir, "context")
	if err := copyBuildContext(root, ctxDir); err != nil {
		return nil, err
	}
	d, err := readDockerfile(root, nil)
	if err != nil {
		return nil, err
	}
	builds, err := d.goBuilds()
	if err != nil {
		return nil, err
	}
	binaries := map[string]string{}
	for _, svc := range services {
		for _, b := range builds {
			env, args, output, err := b.command(map[string]string{"SERVICE": svc, "TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH})
			if err != nil {
				return nil, err
			}
			name := svc
			if !strings.Contains(b.line, "SERVICE") {
				name = filepath.Base(output) // a helper binary such as the healthcheck
				if _, done := binaries[name]; done {
					continue
				}
			}
			local := filepath.Join(outDir, name)
			args = slices.Clone(args)
			args[slices.Index(args, output)] = local
			// No deadline of its own: with -trimpath and -ldflags no other build of the run
			// shares its cache, so on a fresh machine the first one compiles every
			// dependency, which took more than 5 minutes on the loaded 2-core machine
			// (killed, and three tests failed). go test's -timeout bounds a build that hangs.
			cmd := exec.Command("go", args...)
			cmd.Dir = ctxDir
			cmd.Env = append(withoutGOWORK(os.Environ()), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("%s (for %s): %v\n%s", b.line, svc, err, out)
			}
			binaries[name] = local
		}
	}
	return binaries, nil
}

// withoutGOWORK drops GOWORK: the image build uses the go.work of the context.
func withoutGOWORK(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "GOWORK=") })
}

// copyBuildContext copies what `docker build .` would send: every file of root that
// .dockerignore does not exclude. Building from this copy proves .dockerignore keeps
// everything the build needs (every module of go.work, every embedded file).
func copyBuildContext(root, dst string) error {
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		return err
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		return err
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		excluded, err := pm.MatchesOrParentMatches(rel)
		if err != nil {
			return err
		}
		if excluded {
			if e.IsDir() && !pm.Exclusions() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o755)
		case e.Type().IsRegular():
			return copyFile(path, target)
		}
		return nil // sockets, symlinks: a build context has none that matter
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func TestDockerfileBuildsStaticNonRootStages(t *testing.T) {
	t.Parallel()
	d := parseDockerfile(t, repoRoot(t))
	for _, w := range d.lintWarn {
		t.Errorf("%s: BuildKit lint: %s", dockerfilePath, w)
	}

	build, ok := d.stage(buildStage)
	if !ok {
		t.Fatalf("%s: no stage %q; stages: %v", dockerfilePath, buildStage, d.stageNames())
	}
	if !strings.HasPrefix(build.BaseName, "golang:1.26") {
		t.Errorf("build stage FROM %s, want golang:1.26 (the toolchain of go.work)", build.BaseName)
	}

	svc, ok := d.stage(serviceStage)
	if !ok {
		t.Fatalf("%s: no stage %q; stages: %v", dockerfilePath, serviceStage, d.stageNames())
	}
	if !strings.HasPrefix(svc.BaseName, "gcr.io/distroless/static") || !strings.HasSuffix(svc.BaseName, ":nonroot") {
		t.Errorf("service stage FROM %s, want gcr.io/distroless/static...:nonroot", svc.BaseName)
	}

	// Every file the service stage copies from the build stage is an output of one of its
	// go build lines, and the entrypoint is one of them.
	builds, err := d.goBuilds()
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]bool{}
	for _, b := range builds {
		_, _, output, err := b.command(map[string]string{"SERVICE": "ordering", "TARGETOS": "linux", "TARGETARCH": "amd64"})
		if err != nil {
			t.Fatal(err)
		}
		outputs[output] = true
		if !strings.Contains(b.line, "CGO_ENABLED=0") || !strings.Contains(b.line, "-trimpath") {
			t.Errorf("%s: %q: want CGO_ENABLED=0 (static, for distroless/static) and -trimpath", dockerfilePath, b.line)
		}
	}
	copied := map[string]string{} // destination -> source
	var user string
	var entrypoint []string
	for _, c := range svc.Commands {
		switch c := c.(type) {
		case *instructions.CopyCommand:
			if c.From != buildStage {
				t.Errorf("service stage copies from %q, want only from %q: %s", c.From, buildStage, c)
				continue
			}
			for _, src := range c.SourcePaths {
				if !outputs[src] {
					t.Errorf("service stage copies %s, which no go build line of the build stage writes (outputs: %v)", src, outputs)
				}
				copied[c.DestPath] = src
			}
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Errorf("ENTRYPOINT in shell form: distroless has no shell, use the JSON form")
			}
			entrypoint = c.CmdLine
		}
	}
	if user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("service stage USER %q, want a non-root user", user)
	}
	if len(entrypoint) == 0 || copied[entrypoint[0]] == "" {
		t.Errorf("ENTRYPOINT %v is not a binary copied from the build stage (%v)", entrypoint, copied)
	}
	if copied["/healthcheck"] == "" {
		t.Errorf("service stage has no /healthcheck binary for the compose healthchecks (copied: %v)", copied)
	}
}

// TestDockerfileBuildsEveryService compiles every service that exists, and the
// healthcheck, with the Dockerfile's own go build lines in a copy of the build context,
// and checks the binaries are static: distroless/static has no libc to load.
func TestDockerfileBuildsEveryService(t *testing.T) {
	t.Parallel()
	binaries := builtBinaries(t)
	want := append(append(existingServices(t), existingWebServices(t)...), "healthcheck")
	for _, name := range want {
		path, ok := binaries[name]
		if !ok {
			t.Errorf("%s was not built", name)
			continue
		}
		if err := checkStatic(path); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(want) < 2 {
		t.Fatalf("no service to build: %v", want)
	}
}

// checkStatic fails for a dynamically linked ELF binary.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (has an ELF interpreter): it will not start on distroless/static; build with CGO_ENABLED=0")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		return fmt.Errorf("needs shared libraries %v", libs)
	}
	return nil
}

// TestDockerignoreKeepsTheWorkspace guards the build context directly: every module
// go.work names must be in it, and so must the Dockerfile's build inputs.
func TestDockerignoreKeepsTheWorkspace(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.work", "deploy/healthcheck/main.go"}
	for _, line := range strings.Split(string(work), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "./") {
			needed = append(needed, strings.TrimPrefix(line, "./")+"/go.mod")
		}
	}
	for _, p := range needed {
		if excluded, err := pm.MatchesOrParentMatches(p); err != nil || excluded {
			t.Errorf(".dockerignore excludes %s, which the image build needs (err %v)", p, err)
		}
	}
	// And it keeps out what would make every build slow or leak local state.
	for _, p := range []string{".git/config", "bin/ordering", "reports/x/report.html"} {
		if excluded, _ := pm.MatchesOrParentMatches(p); !excluded {
			t.Errorf(".dockerignore does not exclude %s", p)
		}
	}
	if !bytes.Contains(work, []byte("./deploy")) {
		t.Error("go.work does not use ./deploy")
	}
}
