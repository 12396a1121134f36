package verdict_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestGolden judges recorded summaries: each directory of testdata holds a
// scenario (scenario.yaml), the summaries a run of it recorded per variant
// (summaries.json: recorded with pinlab lab run -o json, or written by
// hand for a corner case), and the verdict expected (verdict.golden).
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "*", "scenario.yaml"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases in testdata: %v", err)
	}
	for _, path := range dirs {
		dir := filepath.Dir(path)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := judge(t, dir)
			golden := filepath.Join(dir, "verdict.golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("verdict differs from %s (-want +got; rerun with -update if intended):\n%s", golden, diff)
			}
		})
	}
}

// judge renders the verdict of every recorded variant of the case in dir.
func judge(t *testing.T, dir string) string {
	t.Helper()
	yaml, err := os.ReadFile(filepath.Join(dir, "scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := scenario.Load("scenario.yaml", yaml)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "summaries.json"))
	if err != nil {
		t.Fatal(err)
	}
	var summaries map[string]stats.Summary
	if err := json.Unmarshal(raw, &summaries); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, v := range p.Variants {
		s, ok := summaries[v.Name]
		if !ok {
			continue
		}
		vd := verdict.Judge(p, v, s)
		fmt.Fprintf(&b, "== %s\n", v.Name)
		for _, w := range vd.Why {
			fmt.Fprintf(&b, "why (%s): %s\n", w.Group, w.Line)
		}
		for _, o := range vd.Overloaded {
			fmt.Fprintf(&b, "overloaded [%s]: %s\n", o.Window, o.Reason)
		}
		for _, c := range vd.Checks {
			state := "PASS"
			switch {
			case c.Skipped:
				state = "SKIP"
			case c.Invalid:
				state = "INVALID"
			case !c.Pass:
				state = "FAIL"
			}
			fmt.Fprintf(&b, "%s %s: %s[%s/%s/%s] = %s, want %s", state, c.Name, c.Metric, c.Window, c.Group, c.Pod, c.Shown, c.Bound)
			if c.Note != "" {
				fmt.Fprintf(&b, " (%s)", c.Note)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
