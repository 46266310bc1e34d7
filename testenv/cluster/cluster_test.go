package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
)

// orphanRoot, in the environment of this test binary, makes it a harness that starts a
// Postgres pair under that root, prints its directory and waits to be killed: the orphan
// a killed run leaves behind.
const orphanRoot = "BOOKSTORE_CLUSTER_ORPHAN_ROOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(orphanRoot); root != "" {
		p, err := StartPostgres(context.Background(), root, "orphan")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(p.dir)
		select {} // until killed
	}
	os.Exit(m.Run())
}

// A harness killed with its cluster running cannot close it; the next start under the
// same root kills what it left running and removes its directory, and leaves the clusters
// of live owners alone.
func TestTheNextStartSweepsAwayTheClusterOfAKilledHarness(t *testing.T) {
	t.Parallel()
	if err := PostgresAvailable(); err != nil {
		testenv.Unavailable(t, "Postgres 15 binaries", err)
	}
	root := filepath.Join(os.TempDir(), testenv.Name("bookstore-cluster-sweep"))
	t.Cleanup(func() { _ = os.RemoveAll(root) })

	harness := exec.Command(os.Args[0], "-test.run=^$")
	harness.Env = append(os.Environ(), orphanRoot+"="+root)
	harness.Stderr = os.Stderr
	out, err := harness.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = harness.Process.Kill()
		t.Fatalf("the harness did not start its cluster: %v", err)
	}
	orphan := strings.TrimSpace(line)
	t.Cleanup(func() { killMarked(orphan) }) // should the sweep fail
	_ = harness.Process.Signal(syscall.SIGKILL)
	_ = harness.Wait()
	if left := marked(orphan); len(left) == 0 {
		t.Fatalf("the killed harness's Postgres is not running: nothing to sweep")
	}

	p, err := StartPostgres(context.Background(), root, "next")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if left := marked(orphan); len(left) > 0 {
		t.Errorf("processes %v of the killed harness's cluster still run after the next start", left)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed harness's cluster directory %s is still there (%v)", orphan, err)
	}
	if swept := Sweep(root); len(swept) > 0 {
		t.Errorf("a sweep with this process alive removed %v", swept)
	}
	if _, err := os.Stat(p.dir); err != nil {
		t.Errorf("the live cluster's directory: %v", err)
	}
	// The sweep must not have hurt the live cluster either.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := connect(t, p.AdminURL())
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("the live cluster after the sweep: %v", err)
	}
}
