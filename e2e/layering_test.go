package e2e

import (
	"encoding/json"
	"io"
	"os/exec"
	"path"
	"strings"
	"testing"
)

const module = "github.com/bookstore-go/bookstore/"

// TestLayering keeps the dependencies pointing inwards, the way the code is meant to be
// read: the shared platform knows no service, services know no other service, HTTP
// handlers reach SQL only through a use case, and no package hides behind a name that
// says nothing.
func TestLayering(t *testing.T) {
	cmd := exec.Command("go", "list", "-json", module+"...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		checked++
		owner := serviceOf(p.ImportPath)
		switch path.Base(p.ImportPath) {
		case "utils", "util", "helpers", "common", "manager", "misc":
			t.Errorf("%s: name a package for what it does", p.ImportPath)
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := serviceOf(imp)
			switch {
			case owner == "platform" && dep != "platform" && dep != "sql":
				t.Errorf("%s imports %s: the platform must not know a service", p.ImportPath, imp)
			case isService(owner) && isService(dep) && owner != dep:
				t.Errorf("%s imports %s: services talk over HTTP and events, not imports", p.ImportPath, imp)
			case strings.Contains(p.ImportPath, "/internal/api") && strings.HasSuffix(imp, "/internal/store"):
				t.Errorf("%s imports %s: handlers reach SQL through a use case", p.ImportPath, imp)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d packages", checked)
	}
}

// serviceOf names the module a package belongs to: ordering, platform, sql, e2e, ...
func serviceOf(importPath string) string {
	rest := strings.TrimPrefix(importPath, module)
	parts := strings.Split(rest, "/")
	if parts[0] == "services" && len(parts) > 1 {
		return parts[1]
	}
	return parts[0]
}

func isService(name string) bool {
	switch name {
	case "ordering", "inventory", "notification", "emailprovider":
		return true
	}
	return false
}
