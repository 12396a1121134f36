// Package outcome holds what a run of a plan did and measured: each
// variant's state, its stats.Summary and the diagnose evidence collected in
// its lab, and what a run tells a progress line and a live view while it
// goes. It is pure data, with no I/O: package runner fills it, package
// verdict judges it, package report renders it.
package outcome

import (
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/stats"
)

// Run is what a run did: the seed it used, whether the variants ran side
// by side and in batches of how many, and each variant's outcome in the
// plan's order.
type Run struct {
	Seed       uint64
	SideBySide bool
	// Batch is how many variants ran at once when side by side: the
	// number of variants, or fewer when the backend's bound on clusters
	// at once (runner.Backend's MaxClusters) split them into batches, one
	// after another. 1 when sequential.
	Batch    int
	Variants []Variant
}

// Variant is how one variant's run went and what it measured.
type Variant struct {
	Variant string
	// State is "done", "interrupted" (stopped early: Summary.End says how
	// far load got; windows not over by then are left out) or "failed"
	// (Error says why).
	State string
	Error string
	// DNS is the cluster DNS address ("IP:port"); PodCIDR the pod network.
	DNS, PodCIDR string
	// Dataplane is what served ClusterIPs on a real control plane
	// (pinlab, kube-proxy-nftables, kube-proxy-iptables);
	// "" on the embedded one. Under the real kube-proxy the Summary's
	// proxy connections are the kernel's conntrack entries.
	Dataplane string
	// ClusterIPs maps each target Service ("namespace/name") with a
	// ClusterIP to it.
	ClusterIPs map[string]string
	// CPUPer1000 is the process's CPU time per 1000 finished calls while
	// the variant's load ran, in milliseconds; set only when variants ran
	// one after another (side by side the CPU is shared).
	CPUPer1000 *float64
	// Started is true when load started.
	Started bool
	Summary stats.Summary
	// Diagnoses are the evidence collected for each target Service when
	// the run was asked to diagnose (runner.Options.Diagnose), in the
	// order of the variant's Services; nil when no diagnosis was due
	// before the run stopped.
	Diagnoses []Diagnosis
}

// Diagnosis is the evidence collected for one target Service of a variant.
// Judging it is package diagnose's.
type Diagnosis struct {
	// Service is "namespace/name".
	Service string
	// At is when collecting began, counted from load start.
	At time.Duration
	// Evidence is what was collected (partial when Error is set).
	Evidence evidence.Evidence
	// Error says why collecting failed or stopped short; empty when it
	// finished.
	Error string
}
