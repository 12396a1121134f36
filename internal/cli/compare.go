package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/labrun"
	"github.com/pinlab/pinlab/internal/report"
)

// ExitDataplanesDiffer: lab run --compare-dataplanes finished and some
// figure differs between the dataplanes beyond its tolerance.
const ExitDataplanesDiffer = int(exit.Differ)

// checkCompare checks --compare-dataplanes against the other flags and
// fills in what it implies: the real control plane, and the real
// dataplane to compare with (kube-proxy-nftables unless --dataplane names
// the other).
func (o *LabRunOptions) checkCompare(controlPlaneSet, dataplaneSet bool) error {
	if controlPlaneSet && o.ControlPlane != controlPlaneKubernetes {
		return exit.UsageError(fmt.Errorf("--compare-dataplanes runs on --control-plane %s (the embedded control plane has pinlab's dataplane only)", controlPlaneKubernetes))
	}
	o.ControlPlane = controlPlaneKubernetes
	if !dataplaneSet {
		o.Dataplane = labrun.DataplaneReal
	}
	if labrun.CheckDataplane(o.Dataplane, true, controlPlaneKubernetes) == nil && !labrun.IsReal(o.Dataplane) {
		return exit.UsageError(fmt.Errorf("--compare-dataplanes --dataplane %s: name the real dataplane to compare pinlab's with (kube-proxy-nftables or kube-proxy-iptables)", o.Dataplane))
	}
	switch {
	case o.UI:
		return exit.UsageError(errors.New("--compare-dataplanes: the live dashboard shows one run; leave out --ui"))
	case o.HTML != "":
		return exit.UsageError(errors.New("--compare-dataplanes: the HTML report shows one run; use -o json for both runs and the comparison"))
	}
	return nil
}

// compare runs --compare-dataplanes and prints the figures side by side
// (with -o json, both runs' results too).
func compare(ctx context.Context, opts *LabRunOptions, eo labrun.Options) error {
	if opts.Seed == 0 {
		eo.Seed = rand.Uint64()
	}
	c, err := labrun.Compare(ctx, eo)
	if c == nil {
		return err
	}
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.Out)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(c); werr != nil {
			return werr
		}
	} else if werr := report.FidelityText(opts.Out, c.Fidelity); werr != nil {
		return werr
	}
	return err
}
