package k8s

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/deploy/k8s/internal/overlays"
)

// Every generated file of the overlays is what the generator makes of its source now: a
// change of deploy/rabbitmq, deploy/postgres/init or services/contracts without `make
// generate-k8s`, or a hand edit of a generated file, fails here.
func TestGeneratedFilesAreWhatMakeGenerateK8sWrites(t *testing.T) {
	fresh := t.TempDir()
	if err := overlays.Write(repoRoot(t), fresh); err != nil {
		t.Fatal(err)
	}
	for _, f := range overlays.Files {
		want, err := os.ReadFile(filepath.Join(fresh, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(f.Path)
		if err != nil {
			t.Errorf("%s: %v; run `make generate-k8s`", f.Path, err)
			continue
		}
		if !bytes.Equal(have, want) {
			line, h, w := firstDifference(have, want)
			t.Errorf("deploy/k8s/%s is not what the generator makes of %s; run `make generate-k8s`. Line %d:\n have %q\n want %q", f.Path, f.Source, line, h, w)
		}
	}
}

// firstDifference is the first line (from 1) at which a and b differ, and that line of each.
func firstDifference(a, b []byte) (int, string, string) {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(al), len(bl)) {
		x, y := "(end of file)", "(end of file)"
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return i + 1, x, y
		}
	}
	return 0, "", ""
}
