package main

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goFiles is a small repository every case starts from: a package with a func, a type
// with a method and a field, and a test, a benchmark and a fuzz target.
var goFiles = map[string]string{
	"go.mod": "module example.com/shop\n",
	"stock/stock.go": `package stock

// Handle reserves.
func Handle() {}

// Ledger holds.
type Ledger struct{ Reserved int }

// Add adds.
func (l *Ledger) Add() {}

const Limit = 3
`,
	"stock/stock_test.go": `package stock

import "testing"

func TestInboxDeliveredTwiceReservesOnce(t *testing.T) {}
func BenchmarkReserve(b *testing.B)                   {}
func FuzzDecode(f *testing.F)                         {}
func helperNotATest()                                 {}
`,
	"stock/external_test.go": `package stock_test

import "testing"

func TestFromOutside(t *testing.T) {}
`,
	"contracts/failpoints.go": `package contracts

const (
	OrderingBeforeCommit = "ordering/before-commit"
	RelayAfterPublish    = "relay/after-publish"
)

var Failpoints = []string{OrderingBeforeCommit, RelayAfterPublish, "inventory/after-commit"}
`,
	"docs/other.md":  "# Other page\n\n## Twice\n\n## Twice\n\n## What `go test` runs (and why)\n\n<a id=\"custom\"></a>\n",
	"docs/img/x.svg": "<svg/>",
}

// writeTree writes the files, and extra on top of them, under a new temporary directory.
func writeTree(t *testing.T, extra map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{}
	for k, v := range goFiles {
		files[k] = v
	}
	for k, v := range extra {
		files[k] = v
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestEachRuleReportsItsCaseAndPassesTheFixedOne runs every rule on a doc that breaks it
// and on the same doc put right: the broken one must give exactly the findings listed
// (file:line and a fragment of the message), the right one none.
func TestEachRuleReportsItsCaseAndPassesTheFixedOne(t *testing.T) {
	cases := []struct {
		name  string
		path  string   // the doc's path; docs/page.md when empty
		doc   string   // its content
		want  []string // "line: fragment" of each finding, in order
		right string   // the same doc, correct
	}{
		{
			name:  "a test name that no _test.go defines",
			doc:   "# Page\n\nSee `TestInboxDeliveredTwiceReservesTwice`.\n",
			want:  []string{"3: no func TestInboxDeliveredTwiceReservesTwice("},
			right: "# Page\n\nSee `TestInboxDeliveredTwiceReservesOnce`, `TestFromOutside` and `TestInboxDeliveredTwiceReservesOnce/subtest`.\n",
		},
		{
			name:  "a benchmark or fuzz target that does not exist",
			doc:   "# Page\n\n`BenchmarkReserveTwice` and\n`FuzzEncode`.\n",
			want:  []string{"3: no func BenchmarkReserveTwice(", "4: no func FuzzEncode("},
			right: "# Page\n\n`BenchmarkReserve` and\n`FuzzDecode`.\n",
		},
		{
			name:  "a go test command line in a fenced block",
			doc:   "# Page\n\n```sh\ngo test -run 'TestInboxDeliveredTwice|TestGone$' ./stock\ngo test -run=^TestMissing$ ./stock\n```\n",
			want:  []string{"4: \"TestGone$\" selects no function", "5: \"^TestMissing$\" selects no function"},
			right: "# Page\n\n```sh\ngo test -run 'TestInboxDeliveredTwice|TestFromOutside$' ./stock\ngo test -run '^$' -bench BenchmarkReserve ./stock\ngo test -fuzz FuzzDecode -fuzztime 30s ./stock\n```\n",
		},
		{
			name:  "a go test command line in a code span, and a benchmark pattern that selects only a test",
			doc:   "# Page\n\nRun `go test -bench TestInbox ./stock`.\n",
			want:  []string{"3: go test -bench \"TestInbox\": \"TestInbox\" selects no function"},
			right: "# Page\n\nRun `go test -run TestInbox ./stock`.\n",
		},
		{
			name:  "a package.Name the package does not declare",
			doc:   "# Page\n\n`stock.HandleAll` calls `stock.Ledger.Remove`, and `stock.fetch()`.\n",
			want:  []string{"3: package stock declares no HandleAll", "3: stock.Ledger has no method or field Remove", "3: package stock declares no fetch"},
			right: "# Page\n\n`stock.Handle` calls `stock.Add` (a method) and `stock.Ledger.Add` on `stock.Ledger.Reserved` up to `stock.Limit`; `stock.Handle(ctx)`.\n",
		},
		{
			name:  "not citations: files, columns, the standard library, other names",
			doc:   "# Page\n\n`stock.go`, `stock.reserved`, `stock_test.go`, `http.Handler`, `shop.Anything`, `os.Exit`.\n",
			want:  nil,
			right: "# Page\n",
		},
		{
			name:  "a link to a missing file",
			doc:   "# Page\n\nSee [the other](other2.md) and\n![a figure](img/y.svg) and [the code](../stock/missing.go).\n",
			want:  []string{"3: no file docs/other2.md", "4: no file docs/img/y.svg", "4: no file stock/missing.go"},
			right: "# Page\n\nSee [the other](other.md) and\n![a figure](img/x.svg) and [the code](../stock/stock.go) and [the package](../stock) and [root](/stock/stock.go#L3).\n",
		},
		{
			name:  "a link to a missing heading",
			doc:   "# Page\n\n[a](other.md#twice-2), [b](#nowhere), [c](other.md#what-go-test-runs-and-why-)\n\n[ref]: other.md#twice-3\n",
			want:  []string{"3: other.md has no heading with anchor #twice-2", "3: page.md has no heading with anchor #nowhere", "3: has no heading with anchor #what-go-test-runs-and-why-", "5: link other.md#twice-3"},
			right: "# Page\n\n## Quiet, then check\n\n[a](other.md#twice-1), [b](#quiet-then-check), [c](other.md#what-go-test-runs-and-why), [d](other.md#custom), [e](#page), [f](#here)\n\n<span id=\"here\"></span>\n\n[ref]: other.md#twice\n[^1]: a footnote, not a link.\n",
		},
		{
			name:  "a link that leaves the repository",
			doc:   "# Page\n\n[up](../../outside.md)\n",
			want:  []string{"3: link ../../outside.md: leaves the repository"},
			right: "# Page\n\n[web](https://example.com/x.md) [mail](mailto:a@b.c)\n",
		},
		{
			name:  "links in code are not links",
			doc:   "# Page\n\n`[x](nowhere.md)`\n\n```md\n[x](nowhere.md)\n```\n",
			want:  nil,
			right: "# Page\n",
		},
		{
			name:  "a Mermaid label with a literal \\n",
			doc:   "# Page\n\n```mermaid\nflowchart LR\n  a[Toxiproxy server\\nin-process] --> b\n```\n",
			want:  []string{`5: Mermaid label with a literal \n`},
			right: "# Page\n\n```mermaid\nflowchart LR\n  a[Toxiproxy server<br>in-process] --> b\n```\n\n```go\nfmt.Println(\"a\\nb\")\n```\n",
		},
		{
			name:  "a failpoint that does not exist, and a wrong count of them",
			doc:   "# Page\n\n`ordering/before-comit` is one of the two names of the contracts.\n",
			want:  []string{"3: `ordering/before-comit`: not a failpoint", "3: \"two names of the contracts\": contracts.Failpoints has 3"},
			right: "# Page\n\n`ordering/before-commit` is one of the three names of the contracts (3 failpoints).\n",
		},
		{
			name:  "the contracts page leaves a failpoint out",
			path:  "docs/contracts.md",
			doc:   "# Contracts\n\n`ordering/before-commit`, `relay/after-publish`\n",
			want:  []string{"1: failpoint inventory/after-commit (contracts.Failpoints) is not documented here"},
			right: "# Contracts\n\n`ordering/before-commit`, `relay/after-publish`, `inventory/after-commit`\n",
		},
		{
			name:  "a generated block without its end or its report",
			doc:   "# Page\n\n<!-- generated by make chaos-figures from docs/reports/none.json (summary) -->\ntext\n",
			want:  []string{"3: generated block: no report docs/reports/none.json", "3: generated block without <!-- end generated -->"},
			right: "# Page\n\n<!-- generated by make chaos-figures from docs/other.md (summary) -->\ntext\n<!-- end generated -->\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := cmp.Or(c.path, "docs/page.md")
			got := findingsFor(t, path, c.doc)
			if len(got) != len(c.want) {
				t.Fatalf("got %d findings, want %d:\n%s", len(got), len(c.want), strings.Join(got, "\n"))
			}
			for i, w := range c.want {
				line, fragment, _ := strings.Cut(w, ": ")
				if !strings.HasPrefix(got[i], path+":"+line+": ") || !strings.Contains(got[i], fragment) {
					t.Errorf("finding %d is %q, want %s:%s with %q", i, got[i], path, line, fragment)
				}
			}
			if right := findingsFor(t, path, c.right); len(right) > 0 {
				t.Errorf("the right doc has findings:\n%s", strings.Join(right, "\n"))
			}
		})
	}
}

// findingsFor returns the findings of the repository with doc at path.
func findingsFor(t *testing.T, path, doc string) []string {
	t.Helper()
	findings, err := check(writeTree(t, map[string]string{path: doc}))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range findings {
		out = append(out, f.String())
	}
	return out
}

// TestGitHubAnchorsDropPunctuationAndNumberDuplicates checks slug and dedupe against
// anchors GitHub gives to headings of this repository's docs.
func TestGitHubAnchorsDropPunctuationAndNumberDuplicates(t *testing.T) {
	d := parseDoc("x.md", []byte(strings.Join([]string{
		"# The chaos run: watching nothing get lost or done twice",
		"### Heavy faults (issue 22)",
		"#### Issue 22's wrong designs",
		"## Quiet, then check",
		"## `order_answers`: one row per order",
		"## Placed → decided",
		"## [Linked](x.md) **bold** _em_ heading",
		"## Limits",
		"## Limits",
		"## Limits ##",
		"```",
		"## not a heading",
		"```",
	}, "\n")))
	want := []string{
		"the-chaos-run-watching-nothing-get-lost-or-done-twice", "heavy-faults-issue-22",
		"issue-22s-wrong-designs", "quiet-then-check", "order_answers-one-row-per-order",
		"placed--decided", "linked-bold-em-heading", "limits", "limits-1", "limits-2",
	}
	for _, a := range want {
		if !d.anchors[a] {
			t.Errorf("no anchor #%s among %v", a, slices.Sorted(mapsKeys(d.anchors)))
		}
	}
	if len(d.anchors) != len(want) {
		t.Errorf("%d anchors, want %d: %v", len(d.anchors), len(want), slices.Sorted(mapsKeys(d.anchors)))
	}
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestCodeSpansWrapAcrossLinesAndUnclosedBackticksAreText checks the code spans the
// rules read: a span may wrap to the next line, a double-backtick span may hold a
// backtick, and a lone backtick opens nothing.
func TestCodeSpansWrapAcrossLinesAndUnclosedBackticksAreText(t *testing.T) {
	p := newParagraph(10, "a `make chaos-compare\nCHAOS_FLAGS=x` b ``x ` y`` c ` d `TestX`")
	var got []string
	for _, s := range p.spans {
		got = append(got, s.code+"@"+string(rune('0'+s.line-10)))
	}
	want := []string{"make chaos-compare CHAOS_FLAGS=x@0", "x ` y@1", "d@1"}
	if !slices.Equal(got, want) {
		t.Errorf("spans %q, want %q", got, want)
	}
}

// TestTheDocsOfThisRepositoryAgreeWithItsCode runs doccheck on the repository itself, so
// that `make test` (and CI, which runs it) fails on a doc that has drifted, as `make lint`
// does.
func TestTheDocsOfThisRepositoryAgreeWithItsCode(t *testing.T) {
	findings, err := check(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Error(f)
	}
}
