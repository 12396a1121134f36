package verdict

import (
	"time"

	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
)

// Diagnosis is package diagnose's reading of the evidence a run collected
// for one target Service of a variant (outcome.Diagnosis).
type Diagnosis struct {
	// Service is "namespace/name".
	Service string `json:"service"`
	// At is when collecting began, counted from load start.
	At time.Duration `json:"at_ns"`
	// Error says why the evidence could not be collected; Result is then
	// nil: evidence that could not be collected is not judged.
	Error  string           `json:"error,omitempty"`
	Result *diagnose.Result `json:"result,omitempty"`
}

// JudgeRun judges every variant of run, of plan p: the measurements of
// each variant whose load started (Judge), and the evidence collected for
// each of its target Services (diagnose.Diagnose). The verdicts are
// index-aligned with run.Variants; a variant whose load never started has
// no why lines and no checks. Like Judge and diagnose.Diagnose, it is
// pure.
func JudgeRun(p *plan.Plan, run *outcome.Run) []Verdict {
	out := make([]Verdict, len(run.Variants))
	for i, o := range run.Variants {
		if o.Started {
			out[i] = Judge(p, p.Variants[i], o.Summary)
		}
		for _, d := range o.Diagnoses {
			out[i].Diagnoses = append(out[i].Diagnoses, judgeDiagnosis(d))
		}
	}
	return out
}

// judgeDiagnosis reads the evidence of d, if it was collected.
func judgeDiagnosis(d outcome.Diagnosis) Diagnosis {
	out := Diagnosis{Service: d.Service, At: d.At, Error: d.Error}
	if d.Error == "" {
		r := diagnose.Diagnose(d.Evidence)
		out.Result = &r
	}
	return out
}
