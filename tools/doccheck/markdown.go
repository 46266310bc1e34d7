package main

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// A doc is one Markdown file, split the way the rules read it: fenced code blocks,
// the prose between them in paragraphs, and the anchors of its headings.
type doc struct {
	path    string // slash-separated, relative to the repository's root
	lines   []string
	fences  []fence
	paras   []paragraph
	anchors map[string]bool // every #anchor a link to this file may name
}

// A fence is a fenced code block (``` or ~~~).
type fence struct {
	info  string   // the first word after the opening fence: "mermaid", "sh", or ""
	start int      // the line number of its first line inside the fence
	lines []string // the lines between the fences
}

// A paragraph is a run of prose lines between blank lines, fences and headings; a
// heading is a paragraph of its own. Code spans and links may wrap across its lines.
type paragraph struct {
	start  int    // the line number of its first line
	text   string // its lines joined with \n
	masked string // text with every code span blanked out (newlines kept), for links
	spans  []span
}

// A span is an inline code span: `like this`.
type span struct {
	line int    // the line it starts on
	code string // what is between the backticks, trimmed, newlines as spaces
}

// lineOf returns the line number of byte offset off of the paragraph's text.
func (p paragraph) lineOf(off int) int { return p.start + strings.Count(p.text[:off], "\n") }

var (
	headingRe = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlIDRe  = regexp.MustCompile(`<[a-zA-Z][a-zA-Z0-9]*\s(?:[^>]*\s)?(?:id|name)="([^"]+)"`)
)

// parseDoc splits a Markdown file into fences and paragraphs, and collects the anchors
// of its headings as GitHub makes them.
func parseDoc(path string, src []byte) *doc {
	d := &doc{path: path, lines: strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n"), anchors: map[string]bool{}}
	slugs := map[string]int{}
	var para []string
	paraStart := 0
	flush := func() {
		if len(para) > 0 {
			d.paras = append(d.paras, newParagraph(paraStart, strings.Join(para, "\n")))
		}
		para = nil
	}
	var open *fence
	var marker string // the opening fence's run of ` or ~
	for i, line := range d.lines {
		n := i + 1
		trimmed := strings.TrimLeft(line, " \t")
		if open != nil {
			if run := fenceRun(trimmed); run != "" && run[0] == marker[0] && len(run) >= len(marker) && strings.TrimSpace(trimmed[len(run):]) == "" {
				d.fences = append(d.fences, *open)
				open = nil
				continue
			}
			open.lines = append(open.lines, line)
			continue
		}
		if run := fenceRun(trimmed); run != "" && !(run[0] == '`' && strings.Contains(trimmed[len(run):], "`")) {
			flush()
			info, _, _ := strings.Cut(strings.TrimSpace(trimmed[len(run):]), " ")
			open, marker = &fence{info: info, start: n + 1}, run
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			flush()
			d.paras = append(d.paras, newParagraph(n, line))
			d.anchors[dedupe(slugs, slug(headingText(m[2])))] = true
			continue
		}
		for _, m := range htmlIDRe.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		if len(para) == 0 {
			paraStart = n
		}
		para = append(para, line)
	}
	flush()
	if open != nil { // an unclosed fence runs to the end of the file
		d.fences = append(d.fences, *open)
	}
	return d
}

// fenceRun returns the run of three or more backticks or tildes a line starts with, or "".
func fenceRun(line string) string {
	if !strings.HasPrefix(line, "```") && !strings.HasPrefix(line, "~~~") {
		return ""
	}
	n := 0
	for n < len(line) && line[n] == line[0] {
		n++
	}
	return line[:n]
}

// newParagraph finds the code spans of a paragraph: a run of backticks opens one, and
// the next run of the same length closes it; a run that is never closed is literal text.
func newParagraph(start int, text string) paragraph {
	p := paragraph{start: start, text: text}
	masked := []byte(text)
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		open := backtickRun(text, i)
		end := -1
		for j := i + open; j < len(text); {
			if text[j] != '`' {
				j++
				continue
			}
			if n := backtickRun(text, j); n == open {
				end = j
				break
			} else {
				j += n
			}
		}
		if end < 0 {
			i += open
			continue
		}
		code := strings.TrimSpace(strings.ReplaceAll(text[i+open:end], "\n", " "))
		p.spans = append(p.spans, span{line: p.lineOf(i), code: code})
		for k := i; k < end+open; k++ {
			if masked[k] != '\n' {
				masked[k] = ' '
			}
		}
		i = end + open
	}
	p.masked = string(masked)
	return p
}

func backtickRun(s string, i int) int {
	n := 0
	for i+n < len(s) && s[i+n] == '`' {
		n++
	}
	return n
}

var (
	linkInHeadingRe = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRe       = regexp.MustCompile(`<[^>]+>`)
	underscoreEmRe  = regexp.MustCompile(`(^|[\s(])_+([^_\s][^_]*?)_+($|[\s).,:;!?])`)
)

// headingText is a heading's text as GitHub renders it, before the slug: code spans
// keep their content, links their text, and emphasis and HTML tags go.
func headingText(s string) string {
	var b strings.Builder
	parts := strings.Split(s, "`") // odd parts are inside code spans
	for i, part := range parts {
		if i%2 == 1 {
			b.WriteString(part)
			continue
		}
		part = linkInHeadingRe.ReplaceAllString(part, "$1")
		part = htmlTagRe.ReplaceAllString(part, "")
		part = strings.ReplaceAll(part, "*", "")
		part = underscoreEmRe.ReplaceAllString(part, "$1$2$3")
		part = strings.ReplaceAll(part, `\`, "")
		b.WriteString(part)
	}
	return b.String()
}

// slug is GitHub's anchor for a heading's text (github-slugger): lower case, every
// character that is not a letter, a digit, a space, '-' or '_' dropped, each space '-'.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// dedupe gives the second heading with one slug the suffix -1, the third -2, as GitHub does.
func dedupe(seen map[string]int, s string) string {
	result := s
	for {
		if _, taken := seen[result]; !taken {
			break
		}
		seen[s]++
		result = s + "-" + strconv.Itoa(seen[s])
	}
	seen[result] = 0
	return result
}
