// Package verdict reads a variant's plan and what its run measured and says
// what it means: one line per client group saying why the numbers look as
// they do, and the scenario's expectations checked. It is a pure function
// of (plan.Variant, stats.Summary): no I/O, no clock, no lab.
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
	// Checks are the variant's expectations, checked.
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
	return Verdict{Why: explain(p, v, s), Checks: check(p, v, s, ol), Overloaded: ol}
}

// Failed counts the checks that were measured and did not pass.
func (v Verdict) Failed() int {
	n := 0
	for _, c := range v.Checks {
		if !c.Pass && !c.Skipped && !c.Invalid {
			n++
		}
	}
	return n
}

// Skipped counts the checks that could not be measured.
func (v Verdict) Skipped() int {
	n := 0
	for _, c := range v.Checks {
		if c.Skipped {
			n++
		}
	}
	return n
}
