package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// courseFiles add to goFiles a demo program's string and a glossary of two entries.
var courseFiles = map[string]string{
	"services/demo/demo.go": "package demo\n\nconst Line = \"[naive] delivered twice -> Dune reserved: %d\"\n",
	"docs/glossary.md":      "# Glossary\n\n- <a id=\"relay\"></a>**relay.** The loop that publishes.\n- <a id=\"dead-letter\"></a>**dead letter, dead-letter queue (DLQ), `x-dead`.** Parked.\n",
}

// lesson is a lesson with every part, its body padded to n words in all.
func lesson(n int) string {
	s := "# Lesson\n\n```mermaid\nsequenceDiagram\n  A->>B: x\n```\n\n```\n[naive] delivered twice -> Dune reserved: 4 (want 2) ✗ applied twice\n```\n\n" +
		"## Break it yourself\n\n`TestInboxDeliveredTwiceReservesOnce` goes red.\n\n## Check yourself\n\n<details>\n<summary>Q?</summary>\n\nA.\n</details>\n\n<details>\n<summary>Q?</summary>\n\nA.\n</details>\n"
	if pad := n - len(strings.Fields(s)); pad > 0 {
		s += "\n" + strings.Repeat("word ", pad) + "\n"
	}
	return s
}

func courseFindings(t *testing.T, docs map[string]string) []string {
	t.Helper()
	extra := map[string]string{}
	for k, v := range courseFiles {
		extra[k] = v
	}
	for k, v := range docs {
		extra[k] = v
	}
	findings, err := check(writeTree(t, extra))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range findings {
		out = append(out, f.String())
	}
	return out
}

func wantFindings(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d findings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("finding %d is %q, want it to contain %q", i, got[i], w)
		}
	}
}

func TestALessonWithEveryPartWithinItsLimitPasses(t *testing.T) {
	wantFindings(t, courseFindings(t, map[string]string{"docs/course/1-a.md": lesson(800)}))
}

func TestALessonOverItsWordLimitIsReported(t *testing.T) {
	wantFindings(t, courseFindings(t, map[string]string{"docs/course/1-a.md": lesson(801)}),
		"docs/course/1-a.md:1: lesson of 801 words, at most 800")
}

func TestTheCoreTrackOverItsTotalIsReported(t *testing.T) {
	docs := map[string]string{}
	for _, name := range []string{"1-a", "2-b", "3-c", "4-d", "5-e"} {
		docs["docs/course/"+name+".md"] = lesson(700)
	}
	docs["docs/course/README.md"] = strings.Repeat("word ", 900) // not a lesson
	wantFindings(t, courseFindings(t, docs), "docs/course/1-a.md:1: the core track (docs/course) has 3500 words, at most 3200")
}

func TestDocsOverTheirTotalAreReportedAndOtherDirectoriesDoNotCount(t *testing.T) {
	docs := map[string]string{
		"docs/a.md":          strings.Repeat("word ", docsWords-1000),
		"docs/course/1-a.md": lesson(700),
		"services/README.md": strings.Repeat("word ", 30000),
	}
	wantFindings(t, courseFindings(t, docs))
	docs["docs/b.md"] = strings.Repeat("word ", 1000)
	wantFindings(t, courseFindings(t, docs), fmt.Sprintf("words, at most %d", docsWords))
}

func TestALessonMissingAPartIsReportedForEachPart(t *testing.T) {
	l := lesson(0)
	l = strings.Replace(l, "sequenceDiagram", "flowchart LR", 1)
	l = strings.Replace(l, "(want 2) ✗", "", 1)
	l = strings.Replace(l, "`TestInboxDeliveredTwiceReservesOnce` goes red.", "A test goes red.\n\n## Next\n\n`TestInboxDeliveredTwiceReservesOnce`", 1)
	l = strings.Replace(l, "<details>", "<p>", 1)
	wantFindings(t, courseFindings(t, map[string]string{"docs/course/1-a.md": l}),
		"without a ```mermaid sequenceDiagram", "without a make demo line", "without a \"Break it yourself\" heading", "with 1 check questions")
}

func TestADemoLineTheCodeDoesNotPrintIsReported(t *testing.T) {
	l := strings.Replace(lesson(0), "[naive] delivered twice", "[naive] delivered thrice", 1)
	wantFindings(t, courseFindings(t, map[string]string{"docs/course/1-a.md": l}),
		"without a make demo line", "docs/course/1-a.md:9: demo line \"[naive] delivered thrice\": in no string")
}

func TestIssueNumbersAndSeedArticlesAreReportedButTheChaosSeedIsNot(t *testing.T) {
	doc := "# Page\n\nAs the seed article says, and issue 22 found (see issues #9).\n\nThe chaos run's seed, `--seed 7`; `issue 3` in code.\n"
	wantFindings(t, courseFindings(t, map[string]string{"docs/page.md": doc}),
		`docs/page.md:3: "seed article" means nothing`)
	doc = "# Page\n\nIssue 22 found it.\n"
	wantFindings(t, courseFindings(t, map[string]string{"docs/page.md": doc}), `"Issue 22" means nothing`)
}

func TestTheFirstUseOfAGlossaryTermMustLinkToItsEntry(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string
	}{
		{"unlinked", "# The relay\n\nThe relays publish; a\ndead-letter queue parks.\n", []string{
			`docs/page.md:3: first use of glossary term "relays" without a link to docs/glossary.md#relay`,
			`docs/page.md:4: first use of glossary term "dead-letter queue" without a link to docs/glossary.md#dead-letter`}},
		{"linked first, bare later", "# Page\n\nThe [relay](glossary.md#relay) and a [DLQ](glossary.md#dead-letter); the relay, the DLQ.\n", nil},
		{"an abbreviation counts, a code span and another link's text do not", "# Page\n\n`relay` and [the relay page](other.md), then the DLQ.\n", []string{
			`docs/page.md:3: first use of glossary term "DLQ"`}},
		{"case: a lower-case term ignores case, a capital one keeps it", "# Page\n\nRelay first. A dlq in lower case is not the term, x-dead is code only, relayed is another word.\n", []string{
			`"Relay" without a link`}},
		{"a link to another entry is passed over", "# Page\n\n[relay dead letter](glossary.md#relay), then a dead letter.\n", []string{
			`docs/page.md:3: first use of glossary term "dead letter" without`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantFindings(t, courseFindings(t, map[string]string{"docs/page.md": c.doc}), c.want...)
		})
	}
}

func TestFixLinksEachFirstUseAndThenTheDocPasses(t *testing.T) {
	extra := map[string]string{"docs/course/1-a.md": lesson(0) + "\nThe relay and a\ndead-letter queue, then the relay again.\n"}
	for k, v := range courseFiles {
		extra[k] = v
	}
	root := writeTree(t, extra)
	r, err := readRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fixGlossaryLinks(r); err != nil || n != 2 {
		t.Fatalf("fixGlossaryLinks wrote %d links (%v), want 2", n, err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "course", "1-a.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := "The [relay](../glossary.md#relay) and a\n[dead-letter queue](../glossary.md#dead-letter), then the relay again."
	if !strings.Contains(string(b), want) {
		t.Errorf("fixed lesson:\n%s\nwant it to contain:\n%s", b, want)
	}
	if findings, err := check(root); err != nil || len(findings) > 0 {
		t.Errorf("after the fix: %v %v", findings, err)
	}
}
