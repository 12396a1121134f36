// Package verdict reads a variant's plan and what its run measured and says
// what it means: one line per client group saying why the numbers look as
// they do, and the scenario's expectations checked. Judge is a pure
// function of (plan.Variant, stats.Summary): no I/O, no clock, no lab.
// JudgeRun judges a whole run (package outcome): Judge for each variant,
// and package diagnose's reading of the evidence collected in its lab.
package verdict

import (
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// Verdict is what a variant's measurements mean.
type Verdict struct {
	// Why has one line per client group, in the groups' order; empty
	// when no window was measured.
	Why []Why `json:"why,omitempty"`
	// Expectations are the variant's expectations, checked.
	Expectations
	// Diagnoses are package diagnose's readings of the variant's target
	// Services, in the order the run collected them (JudgeRun); nil when
	// none was collected.
	Diagnoses []Diagnosis `json:"diagnoses,omitempty"`
}

// Expectations are a variant's expectations checked. report.Variant embeds
// them as they are, so that the JSON of a result (lab run -o json) names
// their fields "checks" and "overloaded".
type Expectations struct {
	// Checks are the variant's expectations, checked, in the scenario's
	// order.
	Checks []Check `json:"checks,omitempty"`
	// Overloaded lists where the load generator could not keep its
	// schedule: there the machine shaped the timing figures, and checks
	// of timing metrics are invalid.
	Overloaded []Overload `json:"overloaded,omitempty"`
}

// Why says why one group's numbers look as they do.
type Why struct {
	Group string `json:"group"`
	Line  string `json:"line"`
}

// Judge reads the measurements s of variant v of plan p. s is the summary
// of a run that started load (an interrupted run too: s.End short of the
// plan's duration).
func Judge(p *plan.Plan, v plan.Variant, s stats.Summary) Verdict {
	ol := overloads(&s)
	return Verdict{Why: explain(p, v, s), Expectations: Expectations{Checks: check(p, v, s, ol), Overloaded: ol}}
}

// Failed counts the checks that were measured and did not pass.
func (e Expectations) Failed() int {
	n := 0
	for _, c := range e.Checks {
		if !c.Pass && !c.Skipped && !c.Invalid {
			n++
		}
	}
	return n
}

// Invalid counts the checks invalidated by an overloaded machine.
func (e Expectations) Invalid() int {
	n := 0
	for _, c := range e.Checks {
		if c.Invalid {
			n++
		}
	}
	return n
}

// Skipped counts the checks that could not be measured.
func (e Expectations) Skipped() int {
	n := 0
	for _, c := range e.Checks {
		if c.Skipped {
			n++
		}
	}
	return n
}
