package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/evidence/evidencetest"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

// TestJSONGolden: the JSON of a result (pinlab lab run -o json, the format
// docs/report.md documents and pinlab report reads back) keeps its field
// names, order and shape.
func TestJSONGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := JSON(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "scale-out.golden.json", buf.Bytes())
}

// TestNewGolden assembles the result of a recorded run (testdata/new: the
// multi-service scenario and its summary) as lab run does, with a variant
// that ran to the end and was diagnosed, one interrupted and one that
// failed to start, and compares its JSON with testdata/new/result.golden.json.
func TestNewGolden(t *testing.T) {
	p, run := recordedRun(t)
	var buf bytes.Buffer
	if err := JSON(&buf, New(p, run, verdict.JudgeRun(p, run))); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("new", "result.golden.json"), buf.Bytes())
}

// recordedRun loads testdata/new and builds the run: the scenario's one
// variant "base" as recorded, with a failed step and two diagnoses (one
// collected, one not); "cut", the same stopped at 5s; "broken", which never
// started.
func recordedRun(t *testing.T) (*plan.Plan, *outcome.Run) {
	t.Helper()
	yaml, err := os.ReadFile(filepath.Join("testdata", "new", "scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := scenario.Load("scenario.yaml", yaml)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "new", "summaries.json"))
	if err != nil {
		t.Fatal(err)
	}
	var summaries map[string]stats.Summary
	if err := json.Unmarshal(raw, &summaries); err != nil {
		t.Fatal(err)
	}
	base := p.Variants[0]
	cut, broken := base, base
	cut.Name, broken.Name = "cut", "broken"
	p.Variants = append(p.Variants, cut, broken)

	s := summaries["base"]
	s.Steps = []stats.StepRecord{
		{At: 4e9, Name: "victim", Text: "4s: delete pod of Deployment pricing", Pod: "pricing-7d9f8-a"},
		{At: 6e9, Text: "6s: scale Deployment catalog to 5", Error: "deployments.apps \"catalog\" not found"},
	}
	short := s // stopped before the window ended: the runner leaves it out
	short.End, short.Windows, short.Groups = stats.Offset(5e9), nil, nil
	cpu := 1.25
	pods := []evidencetest.Pod{{Calls: map[int]float64{0: 100}}, {Calls: map[int]float64{1: 100}}, {}}
	run := &outcome.Run{Seed: 7, SideBySide: true, Batch: 2, Variants: []outcome.Variant{
		{Variant: "base", State: "done", DNS: "127.96.0.10:53", PodCIDR: "127.244.0.0/16", Started: true, Summary: s, CPUPer1000: &cpu,
			ClusterIPs: map[string]string{"shop/pricing": "127.96.1.2"},
			Diagnoses: []outcome.Diagnosis{
				{Service: "shop/pricing", At: 8 * time.Second, Evidence: evidencetest.Build(false, pods, 2, nil)},
				{Service: "shop/catalog", At: 8 * time.Second, Error: "evidence: channelz GetServers timed out"},
			}},
		{Variant: "cut", State: "interrupted", DNS: "127.97.0.10:53", Started: true, Summary: short},
		{Variant: "broken", State: "failed", Error: "pods not ready", Dataplane: "kube-proxy-nftables"},
	}}
	return p, run
}
