package main

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Rule: a relative link resolves.
//
// [text](path), [text](path#anchor), [text](#anchor), ![alt](path) and a reference
// definition [label]: path must name a file or directory of the repository, relative to
// the doc (or to the root when it starts with /), and an anchor into a Markdown file must
// be one of its headings' GitHub anchors (or an <a id=...>). Links with a scheme
// (https:, mailto:) and links inside code are not checked; an anchor into a file that is
// not Markdown (#L10 of a Go file) is not either.

var (
	inlineLinkRe = regexp.MustCompile(`\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refDefRe     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]^][^\]]*\]:[ \t]*(<[^>\n]*>|\S+)`) // not a footnote: [^1]:
	schemeRe     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

func checkLinks(r *repo, d *doc) []finding {
	var out []finding
	for _, p := range d.paras {
		for _, re := range []*regexp.Regexp{inlineLinkRe, refDefRe} {
			for _, m := range re.FindAllStringSubmatchIndex(p.masked, -1) {
				dest := strings.Trim(p.masked[m[2]:m[3]], "<>")
				if msg := r.resolve(d.path, dest); msg != "" {
					out = append(out, finding{d.path, p.lineOf(m[2]), msg})
				}
			}
		}
	}
	return out
}

// resolve returns why the link dest in the doc at from does not resolve, or "".
func (r *repo) resolve(from, dest string) string {
	if dest == "" || schemeRe.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	target, anchor, _ := strings.Cut(dest, "#")
	target, _, _ = strings.Cut(target, "?")
	if t, err := url.PathUnescape(target); err == nil {
		target = t
	}
	rel := from // a bare #anchor points into the doc itself
	if target != "" {
		if strings.HasPrefix(target, "/") {
			rel = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			rel = path.Join(path.Dir(from), target)
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Sprintf("link %s: leaves the repository", dest)
		}
		info, err := os.Stat(filepath.Join(r.root, filepath.FromSlash(rel)))
		if err != nil {
			return fmt.Sprintf("link %s: no file %s", dest, rel)
		}
		if info.IsDir() {
			return ""
		}
	}
	if anchor == "" || !strings.HasSuffix(rel, ".md") {
		return ""
	}
	t := r.doc(rel)
	if t == nil || t.anchors[anchor] {
		return ""
	}
	return fmt.Sprintf("link %s: %s has no heading with anchor #%s", dest, rel, anchor)
}
