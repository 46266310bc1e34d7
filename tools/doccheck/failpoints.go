package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Rule: the docs name the failpoints there are, and count them right.
//
// The failpoints are the names listed by contracts.Failpoints (read from its source). A
// code span shaped like one (`service/before-…` or `service/after-…`) must be one of
// them; a number written just before "failpoints", "failpoint names" or "names of the
// contracts" must be how many there are; and docs/contracts.md, which documents them,
// must name every one.

var (
	failpointSpanRe  = regexp.MustCompile(`^[a-z]+/(?:before|after)-[a-z-]+$`)
	failpointCountRe = regexp.MustCompile(`(?i)\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d+)\s+(?:failpoints|failpoint\s+names|names\s+of\s+the\s+contracts)\b`)
	numberWords      = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}
)

// failpointsDoc is the doc that documents every failpoint.
const failpointsDoc = "docs/contracts.md"

func checkFailpoints(r *repo, d *doc) []finding {
	names := r.stringList("contracts", "Failpoints")
	if len(names) == 0 {
		return nil
	}
	var out []finding
	named := map[string]bool{}
	for _, p := range d.paras {
		for _, s := range p.spans {
			if failpointSpanRe.MatchString(s.code) {
				named[s.code] = true
				if !slices.Contains(names, s.code) {
					out = append(out, finding{d.path, s.line, fmt.Sprintf("`%s`: not a failpoint of contracts.Failpoints", s.code)})
				}
			}
		}
		for _, m := range failpointCountRe.FindAllStringSubmatchIndex(p.masked, -1) {
			word := strings.ToLower(p.masked[m[2]:m[3]])
			n := slices.Index(numberWords, word)
			if v, err := strconv.Atoi(word); err == nil {
				n = v
			}
			if n != len(names) {
				out = append(out, finding{d.path, p.lineOf(m[0]), fmt.Sprintf("%q: contracts.Failpoints has %d", p.masked[m[0]:m[1]], len(names))})
			}
		}
	}
	if d.path == failpointsDoc {
		for _, name := range names {
			if !named[name] {
				out = append(out, finding{d.path, 1, fmt.Sprintf("failpoint %s (contracts.Failpoints) is not documented here", name)})
			}
		}
	}
	return out
}
