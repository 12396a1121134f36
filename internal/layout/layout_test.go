package layout

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// contributing is the document whose "## Layout" section holds the tree.
const contributing = "CONTRIBUTING.md"

// root returns the repository's root: two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.Contains(mod, []byte("module github.com/pinlab/pinlab\n")) {
		t.Fatalf("%s is not pinlab's root (go.mod: %v)", dir, err)
	}
	return dir
}

// packageDirs lists, slash-separated and relative to root, every directory
// holding a non-test .go file, as the go tool sees them: testdata, vendor
// and directories starting with "." or "_" (build caches, .git) are
// skipped. Nested modules (resolver/kubernetes, build/...) count.
func packageDirs(root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, comparePaths)
	return dirs, err
}

// comparePaths orders paths as a tree lists them: component by component,
// so that a directory's children come right after it.
func comparePaths(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

// entry is one line of the layout tree.
type entry struct {
	path  string // full path, slash-separated: "internal/load/dnstest"
	name  string // last element: "dnstest"
	role  string // the text after the name; may be empty for a directory that only groups others
	depth int    // indentation / 2
	line  int    // line number in the document, from 1
	text  string // the line as written
}

// parseTree reads the first fenced block after the "## Layout" heading of
// doc. Each line is a directory: two spaces of indentation per level, the
// name with a trailing slash, then its role after at least one space.
func parseTree(doc []byte) ([]entry, error) {
	sc := bufio.NewScanner(bytes.NewReader(doc))
	var (
		out     []entry
		stack   []string
		n       int
		inLay   bool
		inBlock bool
	)
	for sc.Scan() {
		n++
		ln := sc.Text()
		switch {
		case !inLay:
			inLay = strings.TrimSpace(ln) == "## Layout"
			continue
		case !inBlock && strings.HasPrefix(ln, "## "):
			return nil, fmt.Errorf("line %d: the Layout section has no fenced block (```)", n)
		case !inBlock:
			inBlock = strings.HasPrefix(ln, "```")
			continue
		case strings.HasPrefix(ln, "```"):
			if len(out) == 0 {
				return nil, fmt.Errorf("line %d: the layout tree is empty", n)
			}
			return out, nil
		case strings.TrimSpace(ln) == "":
			continue
		}
		body := strings.TrimLeft(ln, " ")
		indent := len(ln) - len(body)
		name, role, _ := strings.Cut(body, " ")
		depth := indent / 2
		switch {
		case indent%2 != 0:
			return nil, fmt.Errorf("line %d: %q: indent by two spaces per level", n, ln)
		case depth > len(stack):
			return nil, fmt.Errorf("line %d: %q: indented deeper than the line above allows", n, ln)
		case !strings.HasSuffix(name, "/") || len(name) < 2 || strings.Count(name, "/") != 1:
			return nil, fmt.Errorf("line %d: %q: a line starts with one directory's name and a slash (%q)", n, ln, "name/")
		}
		name = strings.TrimSuffix(name, "/")
		stack = append(stack[:depth], name)
		out = append(out, entry{
			path: strings.Join(stack, "/"), name: name, role: strings.TrimSpace(role),
			depth: depth, line: n, text: ln,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !inLay {
		return nil, fmt.Errorf("no %q heading", "## Layout")
	}
	return nil, fmt.Errorf("the layout tree's fenced block is not closed")
}

// roleColumn is where roles start in the tree (the first entry with one),
// so that suggested lines line up with the others.
func roleColumn(entries []entry) int {
	for _, e := range entries {
		if e.role != "" {
			return strings.Index(e.text, e.role)
		}
	}
	return 30
}

// treeLine renders a line for dir at its depth, its role at column col.
func treeLine(dir, role string, col int) string {
	depth := strings.Count(dir, "/")
	s := strings.Repeat("  ", depth) + path.Base(dir) + "/"
	if role == "" {
		return s
	}
	return s + strings.Repeat(" ", max(col-len(s), 2)) + role
}

// diffTree compares the tree with the package directories and with what
// exists (exists reports whether a directory is there). It returns what
// to tell the reader: where to add which lines, which lines to remove,
// which package lines lack a role. Empty when the tree is right.
func diffTree(entries []entry, pkgs []string, exists func(string) bool) []string {
	byPath := map[string]entry{}
	var msgs []string
	for _, e := range entries {
		if prev, ok := byPath[e.path]; ok {
			msgs = append(msgs, fmt.Sprintf("remove line %d %q: %s/ is already on line %d", e.line, e.text, e.path, prev.line))
			continue
		}
		byPath[e.path] = e
	}
	var stale, live []entry
	for _, e := range entries {
		if !exists(e.path) {
			stale = append(stale, e)
		} else {
			live = append(live, e)
		}
	}
	for _, e := range stale {
		msgs = append(msgs, fmt.Sprintf("remove line %d %q: there is no directory %s/ any more", e.line, e.text, e.path))
	}
	isPkg := map[string]bool{}
	for _, p := range pkgs {
		isPkg[p] = true
		if e, ok := byPath[p]; ok && e.role == "" {
			msgs = append(msgs, fmt.Sprintf("line %d %q: %s/ holds a package: say its role in one line after the name", e.line, e.text, p))
		}
	}
	// Directories to add: each missing package and its missing ancestors.
	add := map[string]bool{}
	for _, p := range pkgs {
		for d := p; d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; ok {
				break
			}
			add[d] = true
		}
	}
	if len(add) == 0 {
		return msgs
	}
	col := roleColumn(entries)
	// Group the new lines by the existing line they go after (0: first).
	after := map[int][]string{}
	for d := range add {
		if add[path.Dir(d)] {
			continue // listed with its new parent
		}
		line := anchor(live, d)
		var block []string
		for sub := range add {
			if sub == d || strings.HasPrefix(sub, d+"/") {
				block = append(block, sub)
			}
		}
		after[line] = append(after[line], block...)
	}
	lines := make([]int, 0, len(after))
	for l := range after {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	for _, l := range lines {
		block := after[l]
		slices.SortFunc(block, comparePaths)
		where := "at the top of the tree"
		if l > 0 {
			for _, e := range entries {
				if e.line == l {
					where = fmt.Sprintf("after line %d %q", l, e.text)
				}
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "add %s:", where)
		for _, d := range block {
			role := ""
			if isPkg[d] {
				role = "<what " + d + " is for, in one line>"
			}
			fmt.Fprintf(&b, "\n    %s", treeLine(d, role, col))
		}
		msgs = append(msgs, b.String())
	}
	return msgs
}

// anchor returns the line after which a new directory d goes: after the
// subtree of the sibling that sorts last before it, else right after its
// parent's line, else 0 (the top).
func anchor(entries []entry, d string) int {
	parent := path.Dir(d)
	line := 0
	for _, e := range entries {
		if parent != "." && e.path == parent {
			line = e.line
		}
	}
	var prev string
	for _, e := range entries {
		if path.Dir(e.path) == parent && comparePaths(e.path, d) < 0 && (prev == "" || comparePaths(e.path, prev) > 0) {
			prev = e.path
		}
	}
	if prev == "" {
		return line
	}
	for _, e := range entries {
		if e.path == prev || strings.HasPrefix(e.path, prev+"/") {
			line = max(line, e.line)
		}
	}
	return line
}

// TestLayoutTree checks that CONTRIBUTING.md's tree lists every package
// directory, each with its role, and no directory that is gone.
func TestLayoutTree(t *testing.T) {
	dir := root(t)
	doc, err := os.ReadFile(filepath.Join(dir, contributing))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := parseTree(doc)
	if err != nil {
		t.Fatalf("%s: %v", contributing, err)
	}
	pkgs, err := packageDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		return err == nil && fi.IsDir()
	}
	if msgs := diffTree(entries, pkgs, exists); len(msgs) > 0 {
		t.Errorf("the layout tree in %s is out of date (keep one line per directory, two spaces per level):\n%s",
			contributing, strings.Join(msgs, "\n"))
	}
}

func TestDiffTree(t *testing.T) {
	doc := "# x\n\n## Layout\n\n```\n" +
		"cmd/\n" +
		"  pinlab/        main\n" +
		"internal/\n" +
		"  cli/           commands\n" +
		"  load/          clients\n" +
		"    dnstest/     a DNS server\n" +
		"  gone/          was here\n" +
		"  proxy/\n" +
		"```\n"
	entries, err := parseTree([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { return p != "internal/gone" }
	tests := []struct {
		name string
		pkgs []string
		want []string
	}{
		{
			name: "up to date",
			pkgs: []string{"cmd/pinlab", "internal/cli", "internal/load", "internal/load/dnstest"},
			want: []string{`remove line 12 "  gone/          was here": there is no directory internal/gone/ any more`},
		},
		{
			name: "a new package among siblings, one after a subtree, one under a new parent",
			pkgs: []string{"cmd/pinlab", "internal/cli", "internal/kubelab", "internal/load", "internal/load/dnstest", "internal/outcome", "pkg/x"},
			want: []string{
				`remove line 12 "  gone/          was here": there is no directory internal/gone/ any more`,
				"add after line 9 \"  cli/           commands\":\n      kubelab/       <what internal/kubelab is for, in one line>",
				"add after line 11 \"    dnstest/     a DNS server\":\n      outcome/       <what internal/outcome is for, in one line>",
				"add after line 13 \"  proxy/\":\n    pkg/\n      x/             <what pkg/x is for, in one line>",
			},
		},
		{
			name: "a package without a role",
			pkgs: []string{"cmd/pinlab", "internal/cli", "internal/load", "internal/load/dnstest", "internal/proxy"},
			want: []string{
				`remove line 12 "  gone/          was here": there is no directory internal/gone/ any more`,
				`line 13 "  proxy/": internal/proxy/ holds a package: say its role in one line after the name`,
			},
		},
		{
			name: "a new top-level directory first",
			pkgs: []string{"api/v1", "cmd/pinlab", "internal/cli", "internal/load", "internal/load/dnstest"},
			want: []string{
				`remove line 12 "  gone/          was here": there is no directory internal/gone/ any more`,
				"add at the top of the tree:\n    api/\n      v1/            <what api/v1 is for, in one line>",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := diffTree(entries, tc.pkgs, exists)
			if !slices.Equal(got, tc.want) {
				t.Errorf("diffTree:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestParseTreeErrors(t *testing.T) {
	tests := []struct {
		name, block string
		want        string
	}{
		{name: "odd indent", block: "a/  x\n   b/  y\n", want: "indent by two spaces"},
		{name: "too deep", block: "a/  x\n    b/  y\n", want: "deeper"},
		{name: "no slash", block: "a  x\n", want: "one directory's name and a slash"},
		{name: "a path, not a name", block: "a/b/  x\n", want: "one directory's name and a slash"},
		{name: "empty", block: "", want: "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseTree([]byte("## Layout\n```\n" + tc.block + "```\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseTree: got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
