package schema

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsFresh fails when a query or migration changed and `make generate`
// was not run: the committed Go would describe SQL that no longer exists. sqlc is pinned
// in tools/sqlc/go.mod and built from the module proxy (the first run takes a few minutes).
func TestGeneratedCodeIsFresh(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("builds sqlc; -short skips it outside CI")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "tool", "sqlc", "-f", filepath.Join(root, "sqlc.yaml"), "diff")
	cmd.Dir = filepath.Join(root, "tools", "sqlc")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("generated code differs from sql/ (run `make generate`): %v\n%s", err, out)
	}
}
