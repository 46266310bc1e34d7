// Command doccheck keeps the docs true to the code: it reads every Markdown file of the
// repository and fails, naming file:line, when a doc cites a Go test or benchmark that no
// _test.go defines, cites a `package.Name` that the package does not declare, links to a
// file or heading that does not exist, puts a literal \n inside a Mermaid label, leaves a
// generated block open, names or counts the failpoints wrong, lets a lesson of the
// course outgrow its limits or lose a part, lets docs/ outgrow its word limit, says
// "issue N", or uses a glossary term first without linking it.
//
//	go run ./tools/doccheck          check the repository in the current directory
//	go run ./tools/doccheck -root D  check the repository at D
//	go run ./tools/doccheck -fix     link glossary terms where pages first use them, then check
//
// `make lint` runs it. Each rule has a file of its own: testnames.go, citations.go,
// links.go, mermaid.go, generated.go, failpoints.go, course.go and glossary.go; repo.go reads the repository
// once (the Markdown files, and every Go file's top-level declarations with go/parser),
// and markdown.go splits a doc into fenced blocks, prose, code spans and headings.
// It reads only the working tree: no network, no git, no build.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	root := flag.String("root", ".", "the repository's root directory")
	fix := flag.Bool("fix", false, "link each glossary term where a page first uses it, then check")
	flag.Parse()
	if *fix {
		r, err := readRepo(*root)
		if err == nil {
			var n int
			n, err = fixGlossaryLinks(r)
			fmt.Fprintf(os.Stderr, "doccheck: %d glossary link(s) written\n", n)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "doccheck:", err)
			os.Exit(2)
		}
	}
	findings, err := check(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doccheck:", err)
		os.Exit(2)
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(os.Stderr, "doccheck: the docs disagree with the repository in %d place(s) above\n", len(findings))
		os.Exit(1)
	}
}
