package e2e

import (
	"encoding/json"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/bookstore-go/bookstore/"

// TestDependenciesPointInwards keeps the dependencies pointing inwards, the way the code is meant to be
// read: the shared platform knows no service and not the system's vocabulary (not even
// in its tests), the vocabulary (services/contracts) knows nothing of the repo but the
// broker's Topology type it is written in, services know no other service, HTTP handlers
// reach SQL only through a use case, the wrong designs (a wrongways package) are chosen
// by a main and known to no real package, and no package hides behind a name that says
// nothing.
func TestDependenciesPointInwards(t *testing.T) {
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
			ImportPath   string
			Imports      []string
			TestImports  []string
			XTestImports []string
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
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := serviceOf(imp)
			switch {
			case isWrongWays(imp) && !isWrongWays(p.ImportPath) && !strings.Contains(p.ImportPath, "/cmd/") && !strings.HasSuffix(p.ImportPath, "/internal/experiments"):
				t.Errorf("%s imports %s: a wrong design is the lesson's code, chosen in a main (or run by the experiments); the real code never knows it", p.ImportPath, imp)
			case dep == "testenv" && slices.Contains(p.Imports, imp) && owner != "testenv" && owner != "tools":
				t.Errorf("%s imports %s outside its tests: the test scaffolding is for tests and the chaos harness only", p.ImportPath, imp)
			case owner == "platform" && dep == "ops":
				t.Errorf("%s imports %s: the lesson does not depend on the operator's commands", p.ImportPath, imp)
			case isDomain(p.ImportPath) && slices.Contains(p.Imports, imp) && (strings.HasSuffix(imp, "/platform/httpapi") || strings.HasSuffix(imp, "/platform/consumer")):
				t.Errorf("%s imports %s: a domain package knows neither the transport nor the consumer loop", p.ImportPath, imp)
			case (owner == "platform" || owner == "testenv" || owner == "ops") && dep == "contracts":
				t.Errorf("%s imports %s: the platform is given a system's names, it does not know them", p.ImportPath, imp)
			case (owner == "platform" || owner == "testenv" || owner == "ops") && dep != "platform" && dep != "sql" && dep != "testenv" && dep != "ops":
				t.Errorf("%s imports %s: the platform must not know a service", p.ImportPath, imp)
			case owner == "contracts" && dep != "contracts" && imp != module+"services/platform/broker":
				t.Errorf("%s imports %s: the vocabulary may import only the broker, whose Topology it fills in", p.ImportPath, imp)
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

// systemNames are pieces of Bookstore's vocabulary (services/contracts) that must not
// appear in a string literal of the platform's code: a mechanism that spells the
// system's exchange, an event type or a failpoint name has started knowing the system
// again. The platform's tests speak a made-up system (testenv.ExampleTopology).
var systemNames = []string{
	"bookstore.events", "bookstore.dlx",
	"order-placed", "stock-reserved", "stock-rejected", "stock-events",
	"ordering/", "inventory/", "notification/",
}

// TestPlatformSpellsNoSystemName reads every string literal of the non-test Go files of
// the platform and of its test scaffolding (testenv); comments may name Bookstore as an
// example, code may not.
func TestPlatformSpellsNoSystemName(t *testing.T) {
	files := 0
	walk := func(name string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return err
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		files++
		fset := token.NewFileSet()
		var s scanner.Scanner
		s.Init(fset.AddFile(name, -1, len(src)), src, nil, 0)
		for {
			pos, tok, lit := s.Scan()
			if tok == token.EOF {
				return nil
			}
			if tok != token.STRING {
				continue
			}
			value, err := strconv.Unquote(lit)
			if err != nil {
				value = lit
			}
			for _, n := range systemNames {
				if strings.Contains(value, n) {
					t.Errorf("%s: %s spells %q, a name of the system: take it from the caller (services/contracts)", fset.Position(pos), lit, n)
				}
			}
		}
	}
	for _, root := range []string{"../services/platform", "../services/ops", "../testenv"} {
		if err := filepath.WalkDir(root, walk); err != nil {
			t.Fatal(err)
		}
	}
	if files < 30 {
		t.Fatalf("read only %d files of services/platform and testenv", files)
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

// isDomain reports whether a package holds a service's use cases: services/<service>/internal/<x>
// where x is not HTTP (api, the storefront's web), generated SQL (store), the
// experiments that drive a whole consumer to show a failure, or the wrong designs, which
// plug in at the consumer's seam (a consumer.Handler wrapper, a consumer that acks on
// arrival) and so must know it.
func isDomain(importPath string) bool {
	parts := strings.Split(strings.TrimPrefix(importPath, module), "/")
	return len(parts) == 4 && parts[0] == "services" && isService(parts[1]) && parts[2] == "internal" &&
		!slices.Contains([]string{"api", "web", "store", "experiments", "wrongways"}, parts[3])
}

// isWrongWays reports whether a package holds wrong designs: the platform's
// (services/platform/wrongways) or a service's (services/<service>/internal/wrongways).
// They may import the real packages, never the reverse.
func isWrongWays(importPath string) bool { return path.Base(importPath) == "wrongways" }

func isService(name string) bool {
	switch name {
	case "ordering", "inventory", "notification", "emailprovider", "storefront":
		return true
	}
	return false
}

// TestLayeringExportsNoNameForAWrongWayAlone keeps the wrong designs beside the real code
// rather than inside its API: an exported function, method, variable or constant of a
// real package (any package under services/ that is not a wrong way, an experiment, the
// sandbox or a command) that the wrong ways or the experiments use must also be used by
// the non-test code of another real package, a command or a tool. Inside a service, a
// use in the declaring package needs no export, so it does not count; the platform is a
// library for any caller, and its own use does. A test is never a user. A name that only
// a wrong way needs from outside is unexported, or the wrong way keeps its own copy.
func TestLayeringExportsNoNameForAWrongWayAlone(t *testing.T) {
	cfg := &packages.Config{
		Mode:  packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:   "..",
		Tests: true,
	}
	pkgs, err := packages.Load(cfg, module+"services/...", module+"tools/...")
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatal("the packages above did not load")
	}
	type export struct {
		name, declaredIn string
		obj              types.Object
	}
	exports := map[string]export{}        // by the position of the declaration
	wrongUsers := map[string][]string{}   // by the position of the declaration
	realUse := map[string]bool{}          // by the position of the declaration
	var realInterfaces []*types.Interface // whose methods the real path calls
	for _, p := range pkgs {
		user := strings.TrimSuffix(p.PkgPath, "_test")
		for id, obj := range p.TypesInfo.Uses {
			if iface := interfaceOf(obj); iface != nil && !isWrongSide(user) {
				realInterfaces = append(realInterfaces, iface)
			}
			if !isAPI(obj) || !isReal(obj.Pkg().Path()) {
				continue
			}
			if obj.Pkg().Path() == user && !strings.HasPrefix(user, module+"services/platform/") {
				continue
			}
			decl := p.Fset.Position(obj.Pos())
			if decl.Filename == "" || strings.HasSuffix(decl.Filename, "_test.go") {
				continue
			}
			key := decl.String()
			exports[key] = export{exportedName(obj), obj.Pkg().Path(), obj}
			switch {
			case isWrongSide(user):
				if !slices.Contains(wrongUsers[key], user) {
					wrongUsers[key] = append(wrongUsers[key], user)
				}
			case user != obj.Pkg().Path() || !strings.HasSuffix(p.Fset.Position(id.Pos()).Filename, "_test.go"):
				// Another package's tests count: a name they share is their
				// scaffolding, not the wrong way's alone.
				realUse[key] = true
			}
		}
	}
	if len(exports) < 100 {
		t.Fatalf("found only %d exported names used across packages", len(exports))
	}
	var found []string
	for key, users := range wrongUsers {
		if !realUse[key] && !calledThroughAnInterface(exports[key].obj, realInterfaces) {
			e := exports[key]
			slices.Sort(users)
			found = append(found, e.declaredIn+": "+e.name+" is exported only for "+strings.Join(users, ", ")+
				" (declared at "+key+"): unexport it, or let the wrong way keep its own copy")
		}
	}
	slices.Sort(found)
	for _, f := range found {
		t.Error(f)
	}
}

// isAPI reports whether obj is an exported function, method, variable or constant. A
// type, its fields and its named values come with the functions that take it:
// PlaceOrderRequest's lines are the API's even where only an experiment spells their
// type, and so is the status pending.
func isAPI(obj types.Object) bool {
	if obj.Pkg() == nil || !obj.Exported() {
		return false
	}
	switch o := obj.(type) {
	case *types.Func:
		return true
	case *types.Const:
		named, ok := o.Type().(*types.Named)
		return !ok || named.Obj().Pkg() != o.Pkg()
	case *types.Var:
		return !o.IsField()
	}
	return false
}

// interfaceOf returns the interface whose method obj is, or nil.
func interfaceOf(obj types.Object) *types.Interface {
	f, ok := obj.(*types.Func)
	if !ok || f.Signature().Recv() == nil {
		return nil
	}
	iface, _ := f.Signature().Recv().Type().Underlying().(*types.Interface)
	return iface
}

// calledThroughAnInterface reports whether obj is a method the real path calls through
// one of ifaces, which its type has every method of (by name: the packages are loaded
// more than once, with and without their tests, so their types are not identical).
func calledThroughAnInterface(obj types.Object, ifaces []*types.Interface) bool {
	f, ok := obj.(*types.Func)
	if !ok || f.Signature().Recv() == nil {
		return false
	}
	set := types.NewMethodSet(types.NewPointer(derefType(f.Signature().Recv().Type())))
	for _, iface := range ifaces {
		has, all := false, true
		for i := range iface.NumMethods() {
			m := iface.Method(i)
			has = has || m.Name() == f.Name()
			all = all && set.Lookup(m.Pkg(), m.Name()) != nil
		}
		if has && all {
			return true
		}
	}
	return false
}

// derefType is t, or what it points to.
func derefType(t types.Type) types.Type {
	if ptr, ok := t.(*types.Pointer); ok {
		return ptr.Elem()
	}
	return t
}

// isReal reports whether a package is on the real path: a service's or the platform's
// package that is neither a wrong way, an experiment nor a command.
func isReal(importPath string) bool {
	return strings.HasPrefix(importPath, module+"services/") && !isWrongSide(importPath) && !strings.Contains(importPath, "/cmd/")
}

// isWrongSide reports whether a package holds the wrong designs, the experiments that
// run them, or the platform's sandbox the experiments run in.
func isWrongSide(importPath string) bool {
	parts := strings.Split(importPath, "/")
	return slices.Contains(parts, "wrongways") || slices.Contains(parts, "experiments") ||
		importPath == module+"services/platform/sandbox"
}

// exportedName is obj as its package's reader names it: Name, Type.Method or Type.Field.
func exportedName(obj types.Object) string {
	name := obj.Name()
	if o, ok := obj.(*types.Func); ok {
		if recv := o.Signature().Recv(); recv != nil {
			t := recv.Type()
			if ptr, ok := t.(*types.Pointer); ok {
				t = ptr.Elem()
			}
			if named, ok := t.(*types.Named); ok {
				name = named.Obj().Name() + "." + name
			}
		}
	}
	return name
}
