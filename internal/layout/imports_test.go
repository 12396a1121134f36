package layout

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is pinlab's module path; the graph below names packages by their
// path after it ("internal/runner").
const module = "github.com/pinlab/pinlab/"

// importGraph is the module's internal import graph: each package's direct
// imports inside the module, test files left out.
type importGraph map[string][]string

// loadGraph reads the root module's packages with go/build, which opens
// their files through the os package, so that go test's cache sees them
// (a `go list` child process would not be seen: a cached pass would hide a
// new import). Build constraints are the host's. The nested modules
// (resolver/kubernetes, build/...) import nothing of the root module.
func loadGraph(t *testing.T) importGraph {
	t.Helper()
	dir := root(t)
	dirs, err := packageDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, d := range dirs {
		if strings.HasPrefix(d, "resolver/") || strings.HasPrefix(d, "build/") {
			continue
		}
		pkg, err := build.Default.ImportDir(filepath.Join(dir, d), 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			continue // only files for other systems
		}
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		fmt.Fprintf(&out, "%s%s %s\n", module, d, strings.Join(pkg.Imports, " "))
	}
	return parseGraph(out.Bytes())
}

// parseGraph reads `go list` lines of "package import import ...", keeping
// the module's own packages only.
func parseGraph(out []byte) importGraph {
	g := importGraph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		g[pkg] = []string{}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				g[pkg] = append(g[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	return g
}

// path returns a chain of imports from pkg to a package for which bad is
// true ("a -> b -> c"), or "" when there is none.
func (g importGraph) path(pkg string, bad func(string) bool) string {
	seen := map[string]bool{}
	var walk func(p string, chain []string) string
	walk = func(p string, chain []string) string {
		if seen[p] {
			return ""
		}
		seen[p] = true
		for _, imp := range g[p] {
			next := append(slices.Clone(chain), imp)
			if bad(imp) {
				return strings.Join(next, " -> ")
			}
			if found := walk(imp, next); found != "" {
				return found
			}
		}
		return ""
	}
	return walk(pkg, []string{pkg})
}

// stages is the order data flows in (YAML -> Plan -> run -> Summary ->
// Verdict -> report): no stage may depend, even through other packages,
// on a later one. The engines and the CLI come after them all.
var stages = []string{
	"internal/scenario",
	"internal/runner",
	"internal/verdict",
	"internal/report",
	"internal/labrun",
	"internal/cli",
}

// The runtime packages: what runs a lab. The stages that read and judge
// (scenario, verdict, report) and the data they pass on (plan, stats,
// outcome) must reach none of them.
var runtime = []string{
	"internal/kubelet", "internal/pod", "internal/load", "internal/loadpod", "internal/l7proxy",
	"internal/lab", "internal/proxy", "internal/clusterdns", "internal/kubeproxy",
	"internal/coredns", "internal/controlplane", "internal/kubelab", "internal/runner",
	"internal/kubeapi", "internal/remote", "internal/xds",
}

// cliBudget is the most of pinlab's packages the CLI may import: it
// parses flags, calls one engine function and prints. 14: the engines
// (labrun, labup, clusterrun, imagebuild, evidence with diagnose, control,
// xds) and what their flags and output share.
const cliBudget = 14

// importRule is one rule of the import graph: pkg must not depend on any
// package for which forbidden is true (directly, or through others when
// transitive).
type importRule struct {
	name       string
	pkg        string
	transitive bool
	forbidden  func(string) bool
}

// rules are the graph's rules, each named for what it keeps.
func rules() []importRule {
	in := func(list ...string) func(string) bool {
		return func(p string) bool { return slices.Contains(list, p) }
	}
	var out []importRule
	for i, st := range stages {
		out = append(out, importRule{name: st + " reaches no later stage", pkg: st, transitive: true, forbidden: in(stages[i+1:]...)})
	}
	for _, pkg := range []string{"internal/scenario", "internal/verdict", "internal/diagnose", "internal/report", "internal/plan", "internal/stats", "internal/outcome"} {
		out = append(out, importRule{name: pkg + " reaches no runtime package", pkg: pkg, transitive: true, forbidden: in(runtime...)})
	}
	return append(out,
		importRule{name: "runner never sees the file and takes its clusters from a Backend", pkg: "internal/runner", transitive: true,
			forbidden: in("internal/scenario", "internal/manifest", "internal/lab", "internal/kubelab", "internal/controlplane")},
		importRule{name: "report renders and judges nothing", pkg: "internal/report", forbidden: in("internal/runner", "internal/evidence")},
		importRule{name: "the engines are siblings", pkg: "internal/labup", transitive: true, forbidden: in("internal/labrun", "internal/cli")},
		importRule{name: "workload is a leaf", pkg: "internal/workload", forbidden: func(string) bool { return true }},
		importRule{name: "lab knows none of its users", pkg: "internal/lab", transitive: true,
			forbidden: in("internal/runner", "internal/labrun", "internal/labup", "internal/control", "internal/cli", "internal/plan", "internal/scenario")},
	)
}

// TestImportGraph: the stages import one way, the pure stages and their
// data reach no runtime package, the runner takes a backend, and the CLI
// stays within its import budget.
func TestImportGraph(t *testing.T) {
	g := loadGraph(t)
	for _, r := range rules() {
		t.Run(r.name, func(t *testing.T) {
			if _, ok := g[r.pkg]; !ok {
				t.Fatalf("no package %s in the module", r.pkg)
			}
			if r.transitive {
				if chain := g.path(r.pkg, r.forbidden); chain != "" {
					t.Errorf("%s: %s", r.pkg, chain)
				}
				return
			}
			for _, imp := range g[r.pkg] {
				if r.forbidden(imp) {
					t.Errorf("%s imports %s", r.pkg, imp)
				}
			}
		})
	}
	t.Run("cli within its import budget", func(t *testing.T) {
		if imps := g["internal/cli"]; len(imps) > cliBudget {
			t.Errorf("internal/cli imports %d of pinlab's packages, more than %d: %s (an engine package is missing)", len(imps), cliBudget, strings.Join(imps, ", "))
		}
	})
}

// TestImportRules checks the checks on made-up graphs: each rule fails on
// the edge it forbids.
func TestImportRules(t *testing.T) {
	tests := []struct {
		name    string
		graph   string // go list lines, module prefix left out
		rule    string
		wantErr string // "" when the rule holds
	}{
		{name: "a stage importing a later stage", graph: "internal/scenario internal/report\ninternal/report", rule: "internal/scenario reaches no later stage",
			wantErr: "internal/scenario -> internal/report"},
		{name: "through another package", graph: "internal/verdict internal/x\ninternal/x internal/report\ninternal/report", rule: "internal/verdict reaches no later stage",
			wantErr: "internal/verdict -> internal/x -> internal/report"},
		{name: "scenario on the kubelet", graph: "internal/scenario internal/kubelet\ninternal/kubelet", rule: "internal/scenario reaches no runtime package",
			wantErr: "internal/scenario -> internal/kubelet"},
		{name: "report on runner", graph: "internal/report internal/runner\ninternal/runner", rule: "report renders and judges nothing",
			wantErr: "internal/report imports internal/runner"},
		{name: "runner on lab", graph: "internal/runner internal/lab\ninternal/lab", rule: "runner never sees the file and takes its clusters from a Backend",
			wantErr: "internal/runner -> internal/lab"},
		{name: "an earlier stage is fine", graph: "internal/report internal/verdict internal/plan\ninternal/verdict internal/plan\ninternal/plan", rule: "internal/report reaches no later stage"},
	}
	byName := map[string]importRule{}
	for _, r := range rules() {
		byName[r.name] = r
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := byName[tt.rule]
			if !ok {
				t.Fatalf("no rule %q", tt.rule)
			}
			var lines []string
			for _, l := range strings.Split(tt.graph, "\n") {
				var f []string
				for _, p := range strings.Fields(l) {
					f = append(f, module+p)
				}
				lines = append(lines, strings.Join(f, " "))
			}
			g := parseGraph([]byte(strings.Join(lines, "\n")))
			var got string
			if r.transitive {
				got = g.path(r.pkg, r.forbidden)
			} else {
				for _, imp := range g[r.pkg] {
					if r.forbidden(imp) {
						got = fmt.Sprintf("%s imports %s", r.pkg, imp)
						break
					}
				}
			}
			if got != tt.wantErr {
				t.Errorf("rule %q on %q: %q, want %q", tt.rule, tt.graph, got, tt.wantErr)
			}
		})
	}
}
