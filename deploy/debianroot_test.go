package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/testenv"
)

// currentRootEnv names the Debian forky root that holds the server versions compose and
// Kubernetes run (RabbitMQ 4.3, Postgres 18), where this machine's own are 3.10 and 15.
// `make test-current` builds the root and sets the variable.
const currentRootEnv = "BOOKSTORE_CURRENT_ROOT"

// defaultCurrentRoot is where the root is when currentRootEnv is not set.
const defaultCurrentRoot = "/var/cache/bookstore/forky"

// currentRoot returns the Debian root a test runs the current servers from, chrooted, with
// want (a path inside the root) present in it. A run that named the root (currentRootEnv
// set, as `make test-current` does) requires it: without it the test fails under CI=true,
// like any missing service. A
// run that did not, as a plain `make test` on a machine that never built the root, skips:
// the root is an optional download, and the machine's own servers are tested either way.
// Chroot needs root privileges, asked for the same way.
func currentRoot(t testing.TB, want string) string {
	t.Helper()
	root, named := os.LookupEnv(currentRootEnv)
	if !named {
		root = defaultCurrentRoot
	}
	missing := func(what string, err error) {
		t.Helper()
		if named {
			testenv.Unavailable(t, what, err)
		}
		if os.Getenv("CI") == "true" {
			// CI's make test runs while .ci/run still bootstraps the root; make
			// test-current runs this test again and names the root, so there a missing
			// root fails it.
			t.Skipf("%s unavailable (%v); in CI `make test-current` runs this with %s set, where the root is required", what, err, currentRootEnv)
		}
		t.Skipf("%s unavailable (%v); `make test-current` builds the root and names it in %s", what, err, currentRootEnv)
	}
	if _, err := os.Stat(filepath.Join(root, want)); err != nil {
		missing("the Debian forky root "+root+" with "+want, err)
	}
	if os.Geteuid() != 0 {
		missing("chroot into "+root, os.ErrPermission)
	}
	return root
}

// chrootCommand runs argv inside root as user (of the root's /etc/passwd; "" for root) in
// a mount namespace of its own, with the root's /proc mounted there (RabbitMQ and
// Postgres read it) and nothing in the machine's own mount table changed. The environment
// is env alone: the machine's PATH and locale name the machine's files, not the root's.
func chrootCommand(root, user string, env []string, argv ...string) *exec.Cmd {
	userspec := "--userspec=0:0"
	if user != "" {
		userspec = "--userspec=" + user + ":" + user
	}
	args := []string{"--mount", "--propagation", "private", "--", "sh", "-c",
		`mount -t proc proc "$0/proc" && u=$1 && shift && exec chroot "$u" "$0" "$@"`, root, userspec, "env", "-i",
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	args = append(args, env...)
	return exec.Command("unshare", append(args, argv...)...)
}

// rootTempDir is a directory for one test inside root, at the returned path outside it
// (for the test) and the path inside it (for the chrooted server). It is removed when the
// test ends.
func rootTempDir(t testing.TB, root string) (outside, inside string) {
	t.Helper()
	outside, err := os.MkdirTemp(filepath.Join(root, "tmp"), "bookstore-deploy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(outside) })
	return outside, "/" + strings.TrimPrefix(strings.TrimPrefix(outside, root), "/")
}
