package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Rule: a page links a glossary term where it first uses it.
//
// The glossary is docs/glossary.md. Each entry is a line "- <a id="ID"></a>**Terms.**";
// its terms are the parts of Terms between commas, without what is in parentheses, and
// a parenthesised abbreviation in capitals is a term too: "dead letter, dead-letter
// queue (DLQ)" gives "dead letter", "dead-letter queue" and "DLQ". A term written as
// code (`mandatory`) is not matched: prose does not use it bare.
//
// In every other page of docs/ and docs/course/, the first use of any of an entry's
// terms must be inside a link to glossary.md#ID. A use is a whole-word match (a plural
// "s" allowed; a space and a hyphen match each other; a term with a capital letter
// matches its case only, any other ignores case) in prose: not in a heading, a fenced
// block, a code span, the destination of a link, an HTML tag or a <summary> line, nor in
// the text of a link to anything else (which cannot hold a second link), which is
// passed over. `doccheck -fix` makes each missing link.

type glossaryEntry struct {
	id    string
	terms []*regexp.Regexp
}

var (
	glossaryEntryRe = regexp.MustCompile(`^- <a id="([^"]+)"></a>\*\*(.+?)\.\*\*`)
	parenRe         = regexp.MustCompile(`\s*\(([^)]*)\)`)
	abbrevRe        = regexp.MustCompile(`^[A-Z0-9]+$`)
	htmlAnyTagRe    = regexp.MustCompile(`<[^>\n]+>`)
)

const glossaryPath = "docs/glossary.md"

// glossary returns the glossary's entries, or nil when there is no glossary.
func (r *repo) glossary() []glossaryEntry {
	g := r.doc(glossaryPath)
	if g == nil {
		return nil
	}
	var out []glossaryEntry
	for _, line := range g.lines {
		m := glossaryEntryRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		e := glossaryEntry{id: m[1]}
		for _, part := range strings.Split(m[2], ", ") {
			var names []string
			for _, p := range parenRe.FindAllStringSubmatch(part, -1) {
				if abbrevRe.MatchString(p[1]) {
					names = append(names, p[1])
				}
			}
			names = append(names, strings.TrimSpace(parenRe.ReplaceAllString(part, "")))
			for _, n := range names {
				if n == "" || strings.Contains(n, "`") {
					continue
				}
				e.terms = append(e.terms, termRe(n))
			}
		}
		if len(e.terms) > 0 {
			out = append(out, e)
		}
	}
	return out
}

// termRe matches a term as a whole word, with a plural s.
func termRe(term string) *regexp.Regexp {
	parts := strings.FieldsFunc(term, func(r rune) bool { return r == ' ' || r == '-' })
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	flags := "(?i)"
	if strings.ToLower(term) != term {
		flags = ""
	}
	return regexp.MustCompile(flags + `(?:^|[^\w-])(` + strings.Join(parts, `[\s-]+`) + `s?)(?:$|[^\w-])`)
}

// A use is the first use of an entry's terms in a doc, and whether it is linked there.
type use struct {
	entry  glossaryEntry
	line   int
	start  int // byte offsets of the term in the doc's text (its lines joined with \n)
	end    int
	linked bool
}

// A proseLink is a link in a paragraph: its text's byte range and its destination.
type proseLink struct {
	start, end int
	dest       string
}

// firstUses returns, for each entry a doc uses, its first use.
func firstUses(r *repo, d *doc) []use {
	entries := r.glossary()
	if entries == nil || d.path == glossaryPath || !inDocs(d.path) {
		return nil
	}
	lineStart := make([]int, len(d.lines)+1)
	for i, l := range d.lines {
		lineStart[i+1] = lineStart[i] + len(l) + 1
	}
	var out []use
	for _, e := range entries {
		for _, p := range d.paras {
			if headingRe.MatchString(p.text) || strings.Contains(p.text, "<summary>") {
				continue
			}
			text, links := proseOf(p)
			best := -1
			var bestEnd int
			for _, re := range e.terms {
				for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
					if in := linkAt(links, m[2]); in != nil && !glossaryLink(r, d.path, in.dest, e.id) {
						continue // in another link's text: passed over
					}
					if best < 0 || m[2] < best || m[2] == best && m[3] > bestEnd {
						best, bestEnd = m[2], m[3]
					}
					break
				}
			}
			if best < 0 {
				continue
			}
			in := linkAt(links, best)
			base := lineStart[p.start-1]
			out = append(out, use{entry: e, line: p.lineOf(best), start: base + best, end: base + bestEnd, linked: in != nil})
			break
		}
	}
	return out
}

// proseOf returns a paragraph's text with code spans, link destinations and HTML tags
// blanked (offsets kept), and its links.
func proseOf(p paragraph) (string, []proseLink) {
	b := []byte(p.masked)
	var links []proseLink
	for _, m := range inlineLinkRe.FindAllStringSubmatchIndex(p.masked, -1) {
		textEnd := strings.LastIndex(p.masked[m[0]:m[2]], "](") + m[0]
		links = append(links, proseLink{start: m[0], end: textEnd, dest: strings.Trim(p.masked[m[2]:m[3]], "<>")})
		for k := textEnd; k < m[1]; k++ {
			b[k] = ' '
		}
	}
	for _, m := range htmlAnyTagRe.FindAllStringIndex(p.masked, -1) {
		for k := m[0]; k < m[1]; k++ {
			b[k] = ' '
		}
	}
	return string(b), links
}

func linkAt(links []proseLink, off int) *proseLink {
	for i := range links {
		if off >= links[i].start && off < links[i].end {
			return &links[i]
		}
	}
	return nil
}

// glossaryLink reports whether dest, in the doc at from, is the glossary's entry id.
func glossaryLink(r *repo, from, dest, id string) bool {
	target, anchor, _ := strings.Cut(dest, "#")
	return anchor == id && path.Join(path.Dir(from), target) == glossaryPath
}

func checkGlossaryLinks(r *repo, d *doc) []finding {
	var out []finding
	for _, u := range firstUses(r, d) {
		if !u.linked {
			text := strings.Join(d.lines, "\n")[u.start:u.end]
			out = append(out, finding{d.path, u.line, fmt.Sprintf("first use of glossary term %q without a link to %s#%s (doccheck -fix adds it)", text, glossaryPath, u.entry.id)})
		}
	}
	return out
}

// fixGlossaryLinks writes each missing link of checkGlossaryLinks into the docs, and
// returns how many it wrote.
func fixGlossaryLinks(r *repo) (int, error) {
	n := 0
	for _, d := range r.docs {
		uses := slices.DeleteFunc(firstUses(r, d), func(u use) bool { return u.linked })
		if len(uses) == 0 {
			continue
		}
		slices.SortFunc(uses, func(a, b use) int { return b.start - a.start })
		text := strings.Join(d.lines, "\n")
		rel, _ := filepath.Rel(path.Dir(d.path), glossaryPath)
		last := len(text) + 1
		for _, u := range uses {
			if u.end > last { // overlaps a link written already
				continue
			}
			text = text[:u.start] + "[" + text[u.start:u.end] + "](" + filepath.ToSlash(rel) + "#" + u.entry.id + ")" + text[u.end:]
			last = u.start
			n++
		}
		if err := os.WriteFile(filepath.Join(r.root, filepath.FromSlash(d.path)), []byte(text), 0o644); err != nil {
			return n, err
		}
	}
	return n, nil
}
