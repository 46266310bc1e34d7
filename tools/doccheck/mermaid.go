package main

import "strings"

// Rule: no Mermaid label holds a literal \n.
//
// GitHub's Mermaid renders \n in a label as the two characters, not as a line break;
// <br> breaks the line. Any \n in a ```mermaid block is reported: outside a label it
// means nothing to Mermaid either.

func checkMermaid(_ *repo, d *doc) []finding {
	var out []finding
	for _, f := range d.fences {
		if f.info != "mermaid" {
			continue
		}
		for i, line := range f.lines {
			if strings.Contains(line, `\n`) {
				out = append(out, finding{d.path, f.start + i, `Mermaid label with a literal \n (GitHub shows it as is): use <br>`})
			}
		}
	}
	return out
}
