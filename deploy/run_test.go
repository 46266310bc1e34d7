package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests of deploy/local/run.sh run it on stand-in service processes: the real
// services listen on the fixed ports 8081-8084, which a test must not take on a machine
// where other people run the system. What is under test is the script's supervision:
// prefixes, skipping what is not built, stopping everything on SIGTERM or when one exits.
// (The script with the real binaries: `make run`.)

// standIn writes an executable that logs a line, records the signal it is stopped with
// in dir/<name>.stopped, and otherwise runs until stopped, or exits with status exit
// after a moment when exit is not empty.
func standIn(t *testing.T, dir, name, exit string) {
	t.Helper()
	script := `#!/usr/bin/env bash
echo "` + name + ` started with LOG_LEVEL=$LOG_LEVEL"
echo "` + name + ` admin ${DATABASE_ADMIN_URL-unset}"
trap 'echo TERM > "` + filepath.Join(dir, name) + `.stopped"; exit 0' TERM
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

func startRunScript(t *testing.T, binDir string) (*exec.Cmd, *syncBuffer, chan error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "deploy", "local", "run.sh"))
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_ADMIN_URL=") {
			environ = append(environ, kv)
		}
	}
	cmd.Env = append(environ, "BIN_DIR="+binDir, "READY_TIMEOUT=1", "LOG_LEVEL=debug")
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
		"ordering      | ordering started with LOG_LEVEL=debug", // prefixed, environment passed on
		"emailprovider | emailprovider started",
		"inventory: " + bin + "/inventory is not built yet, skipping it",
		"notification: " + bin + "/notification is not built yet, skipping it",
		"http://localhost:8081/orders",
		// make run gives the services the local superuser, whose own default is none.
		"ordering      | ordering admin postgres://postgres@localhost:5432/postgres?sslmode=disable",
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
	for _, want := range []string{"notification  | notification failing", "notification exited with status 3"} {
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
