package main

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Rules: the docs stay a course.
//
// The core track is every Markdown file of docs/course/ (a README.md there excepted).
// Words are counted as `wc -w` counts them: runs of non-space characters, fences and
// tables included.
//
//   - A lesson has at most lessonWords words, the core track at most trackWords.
//   - Every page of docs/ and docs/course/ together (`cat docs/*.md docs/course/*.md |
//     wc -w`) has at most docsWords words.
//   - A lesson has a ```mermaid block with a sequenceDiagram (its failure window); a
//     fenced line in make demo's shape, "[tag] what happened -> value (want V), ... ✓" or
//     ✗, whose part before " -> " is in a string of the services' Go code (so the
//     line is one the demo prints); a "Break it yourself" heading followed, before the next
//     heading of its level, by a cited Test function (the testnames rule checks that it
//     exists); and at least two <details> blocks (its check questions, answers folded).
//   - No page of docs/ says "seed article" or "issue N" (the reader has neither): name
//     the idea or the test instead. The chaos run's `--seed` flag and Go's seed corpus
//     are other words.

const (
	lessonWords = 800
	trackWords  = 3200
	// docsWords is the ceiling of all of docs/: a page that grows makes room by
	// dropping repetition elsewhere, not lessons.
	docsWords = 52000
)

var (
	demoLineRe   = regexp.MustCompile(`^\[[a-z][a-z -]*\] .+ -> .*\(want [^)]+\).*(✓|✗)`)
	bannedWordRe = regexp.MustCompile(`(?i)\bseed articles?\b|\bissues? #?\d+\b`)
	testCitedRe  = regexp.MustCompile("`(Test[A-Z0-9_][A-Za-z0-9_]*)")
)

// isLesson reports whether the doc at p is a lesson of the core track.
func isLesson(p string) bool {
	return path.Dir(p) == "docs/course" && path.Base(p) != "README.md"
}

// inDocs reports whether the doc at p is one of the pages the total counts.
func inDocs(p string) bool { return path.Dir(p) == "docs" || path.Dir(p) == "docs/course" }

func words(d *doc) int { return len(strings.Fields(strings.Join(d.lines, "\n"))) }

// checkCourse checks each lesson's limit and parts, and the banned words of every page.
func checkCourse(r *repo, d *doc) []finding {
	var out []finding
	if inDocs(d.path) {
		for _, p := range d.paras {
			if m := bannedWordRe.FindStringIndex(p.masked); m != nil {
				out = append(out, finding{d.path, p.lineOf(m[0]), fmt.Sprintf("%q means nothing to a reader: name the idea or the test", p.masked[m[0]:m[1]])})
			}
		}
	}
	if !isLesson(d.path) {
		return out
	}
	if n := words(d); n > lessonWords {
		out = append(out, finding{d.path, 1, fmt.Sprintf("lesson of %d words, at most %d", n, lessonWords)})
	}
	var diagram, demo bool
	for _, f := range d.fences {
		if f.info == "mermaid" && strings.Contains(strings.Join(f.lines, "\n"), "sequenceDiagram") {
			diagram = true
		}
		for i, line := range f.lines {
			if !demoLineRe.MatchString(line) {
				continue
			}
			prefix, _, _ := strings.Cut(line, " -> ")
			if !r.printed(prefix) {
				out = append(out, finding{d.path, f.start + i, fmt.Sprintf("demo line %q: in no string of the services' code", prefix)})
				continue
			}
			demo = true
		}
	}
	if !diagram {
		out = append(out, finding{d.path, 1, "lesson without a ```mermaid sequenceDiagram of its failure window"})
	}
	if !demo {
		out = append(out, finding{d.path, 1, "lesson without a make demo line: \"[tag] ... -> value (want V) ✓|✗\" in a fenced block"})
	}
	if !breakItYourself(d) {
		out = append(out, finding{d.path, 1, "lesson without a \"Break it yourself\" heading whose section cites the test that goes red"})
	}
	if n := strings.Count(strings.ToLower(strings.Join(d.lines, "\n")), "<details>"); n < 2 {
		out = append(out, finding{d.path, 1, fmt.Sprintf("lesson with %d check questions (<details>), at least 2", n)})
	}
	return out
}

// breakItYourself reports whether the doc has a "Break it yourself" heading followed, up
// to the next heading of the same or a higher level, by a cited test.
func breakItYourself(d *doc) bool {
	level := 0
	for _, p := range d.paras {
		if m := headingRe.FindStringSubmatch(p.text); m != nil {
			if level > 0 && len(m[1]) <= level {
				return false
			}
			if strings.Contains(strings.ToLower(m[2]), "break it yourself") {
				level = len(m[1])
			}
			continue
		}
		if level > 0 && testCitedRe.MatchString(p.text) {
			return true
		}
	}
	return false
}

// checkTotals checks the word limits over several docs: the core track's and the
// whole of docs/. It reports at the first lesson, and at docs/README.md.
func checkTotals(r *repo) []finding {
	var out []finding
	track, total := 0, 0
	first := ""
	for _, d := range r.docs {
		if !inDocs(d.path) {
			continue
		}
		n := words(d)
		total += n
		if isLesson(d.path) {
			track += n
			if first == "" || d.path < first {
				first = d.path
			}
		}
	}
	if track > trackWords {
		out = append(out, finding{first, 1, fmt.Sprintf("the core track (docs/course) has %d words, at most %d", track, trackWords)})
	}
	if total > docsWords {
		out = append(out, finding{"docs/README.md", 1, fmt.Sprintf("docs/*.md and docs/course/*.md have %d words, at most %d: drop repetition, not lessons", total, docsWords)})
	}
	return out
}
