package plan

import (
	"errors"
	"fmt"
	"time"
)

// The proxy modes a variant's Cluster.ProxyMode names: kube-proxy's.
const (
	ProxyModeIPTables = "iptables"
	ProxyModeNFTables = "nftables"
	ProxyModeIPVS     = "ipvs"
)

// ErrNoVariantLeft is returned by ForKubeProxy when no variant of the plan
// can run on the real kube-proxy.
var ErrNoVariantLeft = errors.New("no variant left to run")

// KubeProxyFit is how a plan runs on the real kube-proxy (ForKubeProxy).
type KubeProxyFit struct {
	// Plan is the plan with the variants that run: all but LeftOut.
	Plan *Plan
	// LeftOut are the variants whose proxy mode is ipvs: the real
	// kube-proxy runs in one mode for the whole lab, nftables or
	// iptables, and ipvs's round robin picks unlike either (pinlab's own
	// dataplane emulates it).
	LeftOut []string
	// OtherMode are the iptables or nftables variants that run in the real
	// kube-proxy's mode instead of theirs: both pick an endpoint uniformly
	// at random per new connection, so their figures compare.
	OtherMode []string
}

// ForKubeProxy returns how p runs when the real kube-proxy, in mode
// (ProxyModeNFTables or ProxyModeIPTables), serves every variant's
// ClusterIPs. It returns an error wrapping ErrNoVariantLeft, naming the
// variants, when every variant is left out.
func (p *Plan) ForKubeProxy(mode string) (KubeProxyFit, error) {
	var fit KubeProxyFit
	var keep []string
	for _, v := range p.Variants {
		switch m := v.Cluster.ProxyMode; {
		case m == ProxyModeIPVS:
			fit.LeftOut = append(fit.LeftOut, v.Name)
			continue
		case m != "" && m != mode:
			fit.OtherMode = append(fit.OtherMode, v.Name)
		}
		keep = append(keep, v.Name)
	}
	if len(keep) == 0 {
		return KubeProxyFit{}, fmt.Errorf("variant %v: proxy mode %s: %w", fit.LeftOut, ProxyModeIPVS, ErrNoVariantLeft)
	}
	if len(fit.LeftOut) == 0 {
		fit.Plan = p
		return fit, nil
	}
	var err error
	fit.Plan, err = p.Select(keep)
	return fit, err
}

// FitsDiagnosis reports whether a diagnosis whose first reading is at
// (counted from load start) and whose second is window later ends before
// the plan's load does: diagnose reads the pods while load runs.
func (p *Plan) FitsDiagnosis(at, window time.Duration) bool {
	return at+window <= p.Duration
}
