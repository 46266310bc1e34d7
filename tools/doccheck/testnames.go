package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Rule: a test, benchmark or fuzz target the docs name exists.
//
// A code span that is a test's name (`TestInboxDeliveredTwiceReservesOnce`, or
// `TestX/subtest`) must be a func of that name in some _test.go. A `go test` command
// line, in a code span or a fenced block, is checked by what its -run, -bench and -fuzz
// patterns select: each alternative of the pattern's first level that mentions a
// Test..., Benchmark... or Fuzz... name must select at least one function, as go test
// would read it (`-run 'TestA|TestB$'` fails when TestB is gone even though TestA is
// still there). Patterns that name no test (`-run '^$'`, `-bench .`) are not citations.

var (
	testNameRe   = regexp.MustCompile(`^(?:Test|Benchmark|Fuzz)(?:[A-Z0-9_][A-Za-z0-9_]*)?$`)
	testTokenRe  = regexp.MustCompile(`(?:Test|Benchmark|Fuzz)[A-Z0-9_]`)
	testFlagRe   = regexp.MustCompile(`(?:^|\s)--?(?:test\.)?(run|bench|fuzz)(?:=|\s+)('[^']*'|"[^"]*"|\S+)`)
	goTestLineRe = regexp.MustCompile(`\bgo\s+test\b`)
)

func checkTestNames(r *repo, d *doc) []finding {
	var out []finding
	for _, p := range d.paras {
		for _, s := range p.spans {
			name, _, _ := strings.Cut(s.code, "/")
			switch {
			case testNameRe.MatchString(name):
				if !r.tests[name] {
					out = append(out, finding{d.path, s.line, fmt.Sprintf("`%s`: no func %s( in any _test.go", s.code, name)})
				}
			case goTestLineRe.MatchString(s.code):
				out = append(out, r.checkGoTest(d.path, s.line, s.code)...)
			}
		}
	}
	for _, f := range d.fences {
		for i, line := range f.lines {
			if goTestLineRe.MatchString(line) {
				out = append(out, r.checkGoTest(d.path, f.start+i, line)...)
			}
		}
	}
	return out
}

// checkGoTest checks the -run, -bench and -fuzz patterns of one go test command line.
func (r *repo) checkGoTest(file string, line int, cmd string) []finding {
	var out []finding
	for _, m := range testFlagRe.FindAllStringSubmatch(cmd, -1) {
		flag, pattern := m[1], strings.Trim(m[2], `'"`)
		top, _, _ := strings.Cut(pattern, "/") // go test matches subtests level by level
		for _, alt := range alternatives(top) {
			if !testTokenRe.MatchString(alt) {
				continue
			}
			re, err := regexp.Compile(alt)
			if err != nil {
				out = append(out, finding{file, line, fmt.Sprintf("go test -%s %q: %v", flag, pattern, err)})
				continue
			}
			if !slices.ContainsFunc(r.testNames(), func(name string) bool { return selects(flag, name) && re.MatchString(name) }) {
				out = append(out, finding{file, line, fmt.Sprintf("go test -%s %q: %q selects no function of any _test.go", flag, pattern, alt)})
			}
		}
	}
	return out
}

// selects reports whether go test's -flag can select the function name at all: -bench
// runs benchmarks, -fuzz fuzz targets, -run tests and fuzz targets' seeds.
func selects(flag, name string) bool {
	switch flag {
	case "bench":
		return strings.HasPrefix(name, "Benchmark")
	case "fuzz":
		return strings.HasPrefix(name, "Fuzz")
	default:
		return strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "Fuzz")
	}
}

// alternatives splits a regular expression at the | that are outside parentheses and
// brackets: `^(TestA|TestB)$|TestC` gives `^(TestA|TestB)$` and `TestC`.
func alternatives(pattern string) []string {
	var out []string
	depth, start := 0, 0
	inClass := false
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '\\':
			i++
		case inClass:
			inClass = c != ']'
		case c == '[':
			inClass = true
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == '|' && depth == 0:
			out = append(out, pattern[start:i])
			start = i + 1
		}
	}
	return append(out, pattern[start:])
}

// testNames returns every test function's name, sorted.
func (r *repo) testNames() []string {
	if r.sortedTests == nil {
		for name := range r.tests {
			r.sortedTests = append(r.sortedTests, name)
		}
		slices.Sort(r.sortedTests)
	}
	return r.sortedTests
}
