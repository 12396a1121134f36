package report

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/verdict"
)

// New assembles the result of a run from the plan, what the runner did
// and the verdicts (verdict.JudgeRun: index-aligned with run.Variants, a
// variant whose load never started has no why lines and no checks). It
// judges nothing.
func New(p *plan.Plan, run *outcome.Run, verdicts []verdict.Verdict) *Result {
	r := &Result{
		Scenario: p.Name, Description: p.Description, Source: p.Source,
		Duration: p.Duration.Seconds(), Seed: run.Seed, SideBySide: run.SideBySide,
		MinResolve: p.MinResolutionInterval.Seconds(), DNSTTL: p.DNS.TTL.Seconds(),
		Steps: p.Timeline,
	}
	if run.SideBySide && run.Batch > 0 && run.Batch < len(run.Variants) {
		r.Batch = run.Batch
	}
	if p.DNS.Cache != nil {
		r.DNSCache = p.DNS.Cache.String()
	}
	for _, w := range p.Windows {
		r.Windows = append(r.Windows, WindowSpec{Name: w.Name, From: w.From.Seconds(), To: w.To.Seconds()})
	}
	for i, o := range run.Variants {
		v := p.Variants[i]
		var vd verdict.Verdict
		if i < len(verdicts) {
			vd = verdicts[i]
		}
		r.Variants = append(r.Variants, variant(v, o, vd))
		for _, o := range vd.Overloaded {
			r.Overloaded = r.Overloaded || !o.Burst // the lab's own bursts are not the machine's
		}
	}
	return r
}

func variant(v plan.Variant, o outcome.Variant, vd verdict.Verdict) Variant {
	out := Variant{
		Name: v.Name, Description: v.Description, Servers: v.Servers, Patches: v.Patches,
		DNS: o.DNS, PodCIDR: o.PodCIDR, Dataplane: o.Dataplane, Summary: o.Summary, State: o.State, Error: o.Error,
		CPUPer1000: o.CPUPer1000, Expectations: vd.Expectations,
	}
	if o.State == "interrupted" && o.Started {
		out.Interrupted = o.Summary.End.Seconds()
	}
	for _, g := range v.Groups {
		rg := Group{
			Name: g.Name, Clients: g.Clients, Target: groupTarget(g.Target), ServiceKind: g.Target.Kind(),
			ClusterIP: o.ClusterIPs[g.Target.Key()], Policy: g.PolicyText(), Rate: g.Rate, Settings: strings.Join(g.Settings.Described, ", "), Path: g.Path(),
			OutlierDetection: g.Target.OutlierDetection,
		}
		if g.Settings.Protocol == plan.ProtocolGRPC && g.Settings.L7Proxy == nil {
			rg.LBPolicy, rg.Resolver = g.Policy, g.Settings.Resolver
			if s := g.Settings.PolicySettings; s != "" && json.Valid([]byte(s)) {
				rg.LBConfig = json.RawMessage(s)
			}
		}
		out.Groups = append(out.Groups, rg)
	}
	for _, st := range o.Summary.Steps {
		if st.Error != "" {
			out.StepErrors = append(out.StepErrors, st.Text+": "+st.Error)
		}
		if st.Name != "" && st.Pod != "" {
			if out.StepPods == nil {
				out.StepPods = map[string]string{}
			}
			out.StepPods[st.Name] = st.Pod
		}
	}
	for _, d := range vd.Diagnoses {
		out.Diagnoses = append(out.Diagnoses, Diagnosis{Service: d.Service, At: d.At.Seconds(), Error: d.Error, Result: d.Result})
	}
	switch len(vd.Why) {
	case 0:
	case 1:
		out.Why = vd.Why[0].Line
	default:
		out.WhyByGroup = vd.Why
		var lines []string
		for _, w := range vd.Why {
			lines = append(lines, w.Group+": "+w.Line)
		}
		out.Why = strings.Join(lines, "\n")
	}
	return out
}

// groupTarget is what a group dials, for reports: the Service's name and
// port, or its xds:/// name.
func groupTarget(t plan.Target) string {
	if t.XDS {
		return t.XDSTarget()
	}
	return fmt.Sprintf("%s:%d", t.Host, t.Port)
}
