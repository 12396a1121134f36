package layout

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// userDocs lists, relative to root, the documents a user reads: the
// README, CONTRIBUTING.md and the pages under docs/.
func userDocs(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	docs := []string{"README.md", contributing}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, filepath.ToSlash(rel))
	}
	return docs
}

// prose is one line of a Markdown document outside fenced code blocks.
type prose struct {
	n    int // line number, from 1
	text string
}

// proseLines returns the lines of doc outside fenced code blocks (``` or
// ~~~).
func proseLines(doc []byte) []prose {
	var (
		out   []prose
		fence string
		n     int
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		n++
		ln := sc.Text()
		trimmed := strings.TrimLeft(ln, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, prose{n, ln})
	}
	return out
}

var (
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// link matches [text](target) and ![alt](target), with an optional
	// title; group 1 is the target.
	link = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef matches a reference definition: [label]: target.
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)`)
	// htmlRef matches src="..." and href="..." of inline HTML.
	htmlRef  = regexp.MustCompile(`(?:src|href)="([^"]+)"`)
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// targets returns the link targets of doc with their line numbers, left
// out those inside code (fenced blocks and inline code spans).
func targets(doc []byte) []prose {
	var out []prose
	for _, p := range proseLines(doc) {
		text := codeSpan.ReplaceAllString(p.text, "")
		for _, re := range []*regexp.Regexp{link, refDef, htmlRef} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				out = append(out, prose{p.n, m[1]})
			}
		}
	}
	return out
}

// slug is the anchor GitHub gives a heading: its text as rendered,
// lower-cased, spaces to hyphens, punctuation other than - and _ dropped.
func slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	h = strings.ReplaceAll(h, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of doc's headings; a repeated heading gets
// -1, -2, ... as on GitHub.
func anchors(doc []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, p := range proseLines(doc) {
		m := heading.FindStringSubmatch(p.text)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if k := seen[s]; k > 0 {
			out[s+"-"+strconv.Itoa(k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// checkLink says what is wrong with target, linked from the document at
// from (slash-separated, relative to root); "" when it resolves.
func checkLink(root, from, target string) string {
	if scheme.MatchString(target) {
		return "" // http:, https:, mailto: ...
	}
	p, frag, _ := strings.Cut(target, "#")
	file := from
	if p != "" {
		un, err := url.PathUnescape(p)
		if err != nil {
			return fmt.Sprintf("%q is not a valid path: %v", target, err)
		}
		file = filepath.ToSlash(filepath.Join(filepath.Dir(from), un))
		if file == ".." || strings.HasPrefix(file, "../") {
			return fmt.Sprintf("%q leaves the repository", target)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
			return fmt.Sprintf("%q: no such file %s", target, file)
		}
	}
	if frag == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	doc, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return fmt.Sprintf("%q: %v", target, err)
	}
	if !anchors(doc)[frag] {
		return fmt.Sprintf("%q: %s has no heading whose anchor is #%s", target, file, frag)
	}
	return ""
}

// TestRelativeLinks checks that every relative link (and image) in the
// README, CONTRIBUTING.md and docs/*.md reaches a file or directory of
// the repository, and, when it names a heading of a Markdown file, that
// the heading is there.
func TestRelativeLinks(t *testing.T) {
	dir := root(t)
	checked := 0
	for _, name := range userDocs(t, dir) {
		doc, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range targets(doc) {
			checked++
			if msg := checkLink(dir, name, l.text); msg != "" {
				t.Errorf("%s:%d: link %s", name, l.n, msg)
			}
		}
	}
	if checked < 20 {
		t.Errorf("found only %d links in the documents: is the link pattern broken?", checked)
	}
}

func TestSlug(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Scale limits", "scale-limits"},
		{"Is pinlab's dataplane faithful? `--compare-dataplanes`", "is-pinlabs-dataplane-faithful---compare-dataplanes"},
		{"On a real control plane (`--control-plane kubernetes`)", "on-a-real-control-plane---control-plane-kubernetes"},
		{"`lab up`: a lab to dig and dial by hand", "lab-up-a-lab-to-dig-and-dial-by-hand"},
		{"A [linked](x.md) heading_name", "a-linked-heading_name"},
	}
	for _, tc := range tests {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestTargets(t *testing.T) {
	doc := "see [a](a.md) and ![b](img/b.png \"title\") and `[c](not-a-link.md)`\n" +
		"```\n[d](in-a-fence.md)\n```\n" +
		"[e]: e.md\n<img src=\"f.png\"> [g](http://example.com) [h](#local)\n"
	var got []string
	for _, l := range targets([]byte(doc)) {
		got = append(got, fmt.Sprintf("%d:%s", l.n, l.text))
	}
	want := []string{"1:a.md", "1:img/b.png", "5:e.md", "6:http://example.com", "6:#local", "6:f.png"}
	if !slices.Equal(got, want) {
		t.Errorf("targets:\n got %q\nwant %q", got, want)
	}
}

// claimID matches what only the project's own notes mean: the ids of the
// behaviours the lab reproduces (V1, G4, S5, X1-X4: see the tests) and the
// numbers of the lessons they came from ("seed 001").
var claimID = regexp.MustCompile(`\b[DGSVX][1-9]\b|\b[Ss]eeds? 0\d\d\b|claims\.md|source lessons`)

// TestNoClaimIDs checks that nothing a user reads speaks of claim ids or
// lesson numbers: the documents, and the built-in scenarios (their
// comments are read as examples; their descriptions and expectation names
// are printed in every report). `--seed`, a random seed, is fine.
func TestNoClaimIDs(t *testing.T) {
	dir := root(t)
	files := userDocs(t, dir)
	for _, pattern := range []string{"scenarios/*.yaml", "scenarios/lab/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern)))
		if err != nil || len(m) == 0 {
			t.Fatalf("no files match %s: %v", pattern, err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(dir, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	for _, name := range files {
		doc, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		for i, ln := range strings.Split(string(doc), "\n") {
			if m := claimID.FindString(ln); m != "" {
				t.Errorf("%s:%d: %q means nothing to a user: say what the behaviour is (claim ids stay in tests and NOTES.md): %s",
					name, i+1, m, strings.TrimSpace(ln))
			}
		}
	}
}
