package main

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A finding is one place where a doc disagrees with the repository.
type finding struct {
	file string // slash-separated, relative to the repository's root
	line int
	msg  string
}

func (f finding) String() string { return fmt.Sprintf("%s:%d: %s", f.file, f.line, f.msg) }

// A repo is what the rules check the docs against: the repository's Markdown files and
// the top-level declarations of its Go code, read once.
type repo struct {
	root        string
	docs        []*doc          // every Markdown file, by path
	byPath      map[string]*doc // the same, keyed by slash-separated path
	tests       map[string]bool // Test, Benchmark and Fuzz functions of every _test.go
	sortedTests []string        // the same, sorted (testNames)
	pkgs        map[string]*goPackage
	std         map[string]bool // last elements of the standard library's import paths
	literals    []string        // every string literal of the non-test Go files under services/
}

// printed reports whether s is part of a string literal of the services' code.
func (r *repo) printed(s string) bool {
	for _, l := range r.literals {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// A goPackage is the declarations of every package of the repository with one name:
// several directories may share a name (main, store, config), and a citation of that
// name may mean any of them.
type goPackage struct {
	decls   map[string]bool            // top-level funcs, types, vars and consts
	members map[string]map[string]bool // type name -> its methods, and its fields if a struct
	methods map[string]bool            // every method of every type, by name
	strs    map[string]string          // string constants: name -> value
	lists   map[string][]string        // vars set to a composite literal: name -> its elements' names or string values
}

// A rule checks one doc against the repository.
type rule func(r *repo, d *doc) []finding

// rules are every check doccheck makes, one file each.
var rules = []rule{checkTestNames, checkCitations, checkLinks, checkMermaid, checkGenerated, checkFailpoints, checkCourse, checkGlossaryLinks}

// check reads the repository at root and returns every finding, sorted by file and line.
func check(root string) ([]finding, error) {
	r, err := readRepo(root)
	if err != nil {
		return nil, err
	}
	out := checkTotals(r)
	for _, d := range r.docs {
		for _, check := range rules {
			out = append(out, check(r, d)...)
		}
	}
	slices.SortStableFunc(out, func(a, b finding) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line))
	})
	return out, nil
}

// skipDir reports whether the walk leaves a directory out: hidden ones (.git), other
// people's code, and what builds and chaos runs leave behind.
func skipDir(rel, name string) bool {
	if rel == "." {
		return false
	}
	if strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor" {
		return true
	}
	return rel == "bin" || rel == "reports" || rel == "tmp"
}

// readRepo walks the repository: every .md file becomes a doc, every .go file outside
// testdata is parsed for its top-level declarations.
func readRepo(root string) (*repo, error) {
	r := &repo{root: root, byPath: map[string]*doc{}, tests: map[string]bool{}, pkgs: map[string]*goPackage{}, std: stdPackages()}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if skipDir(rel, e.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(rel, ".md"):
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			d := parseDoc(rel, src)
			r.docs = append(r.docs, d)
			r.byPath[rel] = d
		case strings.HasSuffix(rel, ".go") && !slices.Contains(strings.Split(rel, "/"), "testdata"):
			// A file that does not parse is go vet's business; what did parse still counts.
			f, _ := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if f != nil {
				r.addGoFile(f, strings.HasSuffix(rel, "_test.go"))
				if strings.HasPrefix(rel, "services/") && !strings.HasSuffix(rel, "_test.go") {
					r.addLiterals(f)
				}
			}
		}
		return nil
	})
	return r, err
}

// addLiterals records every string literal of a file.
func (r *repo) addLiterals(f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil {
				r.literals = append(r.literals, v)
			}
		}
		return true
	})
}

// addGoFile records a file's test functions and its package's top-level declarations.
// An external test package (name_test) declares nothing a doc would cite as name.X.
func (r *repo) addGoFile(f *ast.File, isTest bool) {
	name := f.Name.Name
	external := strings.HasSuffix(name, "_test")
	p := r.pkgs[name]
	if p == nil && !external {
		p = &goPackage{decls: map[string]bool{}, members: map[string]map[string]bool{}, methods: map[string]bool{}, strs: map[string]string{}, lists: map[string][]string{}}
		r.pkgs[name] = p
	}
	member := func(typ, m string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][m] = true
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			fn := decl.Name.Name
			if decl.Recv == nil && isTest && isTestFunc(fn) {
				r.tests[fn] = true
			}
			if external {
				continue
			}
			if decl.Recv == nil {
				p.decls[fn] = true
			} else if len(decl.Recv.List) == 1 {
				member(receiverType(decl.Recv.List[0].Type), fn)
				p.methods[fn] = true
			}
		case *ast.GenDecl:
			if external {
				continue
			}
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					p.decls[spec.Name.Name] = true
					for _, m := range fieldsAndMethods(spec.Type) {
						member(spec.Name.Name, m)
					}
				case *ast.ValueSpec:
					for i, n := range spec.Names {
						p.decls[n.Name] = true
						if i < len(spec.Values) {
							p.addValue(n.Name, spec.Values[i])
						}
					}
				}
			}
		}
	}
}

// isTestFunc reports whether name is what go test runs: Test, Benchmark or Fuzz followed
// by nothing or by a character that is not a lower-case letter.
func isTestFunc(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			return rest == "" || !(rest[0] >= 'a' && rest[0] <= 'z')
		}
	}
	return false
}

// receiverType is the name of a method's receiver type: T for T, *T, T[K] and *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// fieldsAndMethods are the names a doc may cite after a type: a struct's fields
// (embedded ones by their type's name) and an interface's methods.
func fieldsAndMethods(e ast.Expr) []string {
	var list *ast.FieldList
	switch t := e.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var out []string
	for _, f := range list.List {
		for _, n := range f.Names {
			out = append(out, n.Name)
		}
		if len(f.Names) == 0 {
			if n := receiverType(f.Type); n != "" {
				out = append(out, n)
			} else if sel, ok := f.Type.(*ast.SelectorExpr); ok {
				out = append(out, sel.Sel.Name)
			} else if star, ok := f.Type.(*ast.StarExpr); ok {
				if sel, ok := star.X.(*ast.SelectorExpr); ok {
					out = append(out, sel.Sel.Name)
				}
			}
		}
	}
	return out
}

// stdPackages returns the last element of every standard library import path (http,
// json, context), read from GOROOT/src: a citation like `http.Handler` names the
// standard library, not a package of the repository that happens to share the name.
// Without a GOROOT it returns none.
func stdPackages() map[string]bool {
	std := map[string]bool{}
	src := filepath.Join(build.Default.GOROOT, "src")
	_ = filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		name := e.Name()
		if rel == "cmd" || name == "testdata" || name == "internal" || name == "vendor" {
			return filepath.SkipDir
		}
		if rel != "." {
			std[path.Base(filepath.ToSlash(rel))] = true
		}
		return nil
	})
	return std
}

// doc returns the Markdown file at the slash-separated path rel, reading it if the walk
// left it out; nil if there is none.
func (r *repo) doc(rel string) *doc {
	if d, ok := r.byPath[rel]; ok {
		return d
	}
	src, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(rel)))
	if err != nil {
		r.byPath[rel] = nil
		return nil
	}
	d := parseDoc(rel, src)
	r.byPath[rel] = d
	return d
}

// addValue records what the rules read of a top-level value: a string constant's value,
// and the elements of a composite literal (a list of names, like contracts.Failpoints).
func (p *goPackage) addValue(name string, v ast.Expr) {
	switch v := v.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(v.Value); err == nil && v.Kind == token.STRING {
			p.strs[name] = s
		}
	case *ast.CompositeLit:
		var elems []string
		for _, e := range v.Elts {
			switch e := e.(type) {
			case *ast.Ident:
				elems = append(elems, e.Name)
			case *ast.BasicLit:
				if s, err := strconv.Unquote(e.Value); err == nil {
					elems = append(elems, s)
				}
			}
		}
		p.lists[name] = elems
	}
}

// stringList returns the values of the list var pkg.name, each element a string constant
// of the package or a string literal; nil when there is no such list.
func (r *repo) stringList(pkg, name string) []string {
	p := r.pkgs[pkg]
	if p == nil {
		return nil
	}
	var out []string
	for _, e := range p.lists[name] {
		if v, ok := p.strs[e]; ok {
			e = v
		}
		out = append(out, e)
	}
	return out
}
