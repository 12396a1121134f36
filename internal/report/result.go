// Package report renders the results of lab runs: a terminal report with
// per-variant, per-window pod tables and a comparison across variants, and
// the full result as JSON for tools. It is the last stage of a run: New
// assembles a Result from the plan, the runner's outcomes and the
// verdicts, once, after the run; the renderers only format it.
package report

import (
	"encoding/json"
	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/lbpolicy"
	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

// Result is everything a run measured.
type Result struct {
	Scenario string `json:"scenario"`
	// Cluster, for a cluster run, is the API server it ran on; empty for
	// a lab's run.
	Cluster     string  `json:"cluster,omitempty"`
	Description string  `json:"description,omitempty"`
	Source      string  `json:"source"`
	Duration    float64 `json:"duration_s"`
	Seed        uint64  `json:"seed"`
	SideBySide  bool    `json:"side_by_side"`
	// Batch, when side by side in batches, is how many variants ran at
	// once (each batch after the previous one ended); 0 when all ran at
	// once or one after another.
	Batch      int     `json:"batch,omitempty"`
	MinResolve float64 `json:"grpc_min_resolution_interval_s"`
	DNSTTL     float64 `json:"dns_ttl_s"`
	// DNSCache is CoreDNS's cache plugin in front of the cluster DNS, in
	// Corefile form ("cache 30"); empty for none.
	DNSCache string       `json:"dns_cache,omitempty"`
	Windows  []WindowSpec `json:"windows"`
	Steps    []string     `json:"timeline"`
	Variants []Variant    `json:"variants"`
	// Overloaded is true when the load generator fell behind its schedule
	// in some variant for the machine's reasons (its "overloaded" lists
	// where; entries with "burst" are the lab's own work, pods starting or
	// connections opening, and do not count): the figures there measure
	// the machine as much as Kubernetes. It is the field a script checks;
	// expectations either invalidated also make lab run exit 3.
	Overloaded bool `json:"overloaded"`
}

// WindowSpec is a measurement window.
type WindowSpec struct {
	Name string  `json:"name"`
	From float64 `json:"from_s"`
	To   float64 `json:"to_s"`
}

// Group is one client group as a variant ran it.
type Group struct {
	Name        string `json:"name"`
	Clients     int    `json:"clients"`
	Target      string `json:"target"`
	ServiceKind string `json:"service_kind"` // ClusterIP or headless
	ClusterIP   string `json:"cluster_ip,omitempty"`
	Policy      string `json:"policy"`
	// LBPolicy is the balancer's name (pick_first, round_robin, ...) and
	// Resolver how the client resolves ("xds": the lab's xDS control
	// plane chose LBPolicy through the Service's annotation); both empty
	// for HTTP and WebSocket clients and behind an L7 proxy.
	LBPolicy string `json:"lb_policy,omitempty"`
	Resolver string `json:"resolver,omitempty"`
	// LBConfig is the policy's settings with grpc-go's names (from the
	// client's policyConfig, or an xDS Service's annotation); absent for
	// the defaults.
	LBConfig json.RawMessage `json:"lb_config,omitempty"`
	// OutlierDetection is an xDS Service's outlier detection (gRFC A50),
	// with grpc-go's JSON names as the annotation gave it (defaults left
	// out); nil for none.
	OutlierDetection *lbpolicy.OutlierDetection `json:"outlier_detection,omitempty"`
	Rate             float64                    `json:"rate_per_client"`
	// Settings describes the runtime settings that differ from the
	// defaults (resolver, cache, health checking, L7 proxy, ...).
	Settings string `json:"settings,omitempty"`
	// Path is how calls reach the pods: "direct", "L7 sidecar" or "L7
	// gateway".
	Path string `json:"path"`
}

// Variant is one variant's measurements and reading.
type Variant struct {
	Name        string  `json:"name"`
	Description string  `json:"description,omitempty"`
	Groups      []Group `json:"groups"`
	Servers     string  `json:"servers,omitempty"`
	// Patches describes the variant's object patches.
	Patches string `json:"patches,omitempty"`
	DNS     string `json:"dns_addr,omitempty"`
	PodCIDR string `json:"pod_cidr,omitempty"`
	// Dataplane is what served ClusterIPs on a real control plane
	// (outcome.Variant.Dataplane); "" on the embedded one.
	Dataplane string        `json:"dataplane,omitempty"`
	Summary   stats.Summary `json:"summary"`
	// Why says why the numbers look as they do: the line of the one
	// client group, or each group's line ("group: line") one per line.
	Why string `json:"why,omitempty"`
	// WhyByGroup has each client group's line when there are several.
	WhyByGroup []verdict.Why `json:"why_by_group,omitempty"`
	StepErrors []string      `json:"step_errors,omitempty"`
	// State is "done", "interrupted" (stopped early; windows not over by
	// then are left out) or "failed" (see Error).
	State string `json:"state"`
	// Interrupted is how far load got, in seconds, when the run was stopped;
	// zero when it ran to the end or never started.
	Interrupted float64 `json:"interrupted_at_s,omitempty"`
	Error       string  `json:"error,omitempty"`
	// CPUPer1000 is the process's CPU time per 1000 finished calls while
	// this variant's load ran, in milliseconds; set only when variants ran
	// one after another (side by side the CPU is shared).
	CPUPer1000 *float64 `json:"cpu_ms_per_1000_calls,omitempty"`
	// StepPods maps named timeline steps to the pod each acted on.
	StepPods map[string]string `json:"step_pods,omitempty"`
	// Expectations are the scenario's expectations as verdict.Judge
	// checked them for this variant ("checks"), and where the load
	// generator could not keep its schedule ("overloaded"); Failed,
	// Invalid and Skipped count them.
	verdict.Expectations
	// Diagnoses are pinlab diagnose's readings of the variant's target
	// Services, taken in its lab while load ran (lab run --diagnose).
	Diagnoses []Diagnosis `json:"diagnoses,omitempty"`
}

// Diagnosis is pinlab diagnose's reading of one target Service of a
// variant: the evidence the runner collected in the variant's lab, judged
// by package diagnose.
type Diagnosis struct {
	// Service is "namespace/name".
	Service string `json:"service"`
	// At is when collecting began, in seconds of load.
	At float64 `json:"at_s"`
	// Error says why the evidence could not be collected; Result is then
	// nil.
	Error  string           `json:"error,omitempty"`
	Result *diagnose.Result `json:"result,omitempty"`
}
