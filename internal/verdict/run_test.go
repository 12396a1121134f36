package verdict_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/evidence/evidencetest"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

// TestJudgeRun judges a run of the multi-service case: a variant that ran,
// with one diagnosis collected and one not, and one that never started.
func TestJudgeRun(t *testing.T) {
	dir := filepath.Join("testdata", "multi-service")
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
	broken := p.Variants[0]
	broken.Name = "broken"
	p.Variants = append(p.Variants, broken)
	ev := evidencetest.Build(false, []evidencetest.Pod{{Calls: map[int]float64{0: 100}}, {Calls: map[int]float64{1: 100}}, {}}, 2, nil)
	run := &outcome.Run{Variants: []outcome.Variant{
		{Variant: "base", State: "done", Started: true, Summary: summaries["base"], Diagnoses: []outcome.Diagnosis{
			{Service: "shop/pricing", At: 8 * time.Second, Evidence: ev},
			{Service: "shop/catalog", At: 8 * time.Second, Evidence: ev, Error: "evidence: channelz GetServers timed out"},
		}},
		{Variant: "broken", State: "failed", Error: "pods not ready"},
	}}

	want := verdict.Judge(p, p.Variants[0], summaries["base"])
	judged := diagnose.Diagnose(ev)
	want.Diagnoses = []verdict.Diagnosis{
		{Service: "shop/pricing", At: 8 * time.Second, Result: &judged},
		{Service: "shop/catalog", At: 8 * time.Second, Error: "evidence: channelz GetServers timed out"},
	}
	got := verdict.JudgeRun(p, run)
	if diff := cmp.Diff([]verdict.Verdict{want, {}}, got); diff != "" {
		t.Errorf("JudgeRun (-want +got):\n%s", diff)
	}
	if len(want.Checks) == 0 || len(want.Why) == 0 {
		t.Errorf("the case judges nothing (%d checks, %d why lines): the test would not see JudgeRun skip Judge", len(want.Checks), len(want.Why))
	}
}
