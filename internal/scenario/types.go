// Package scenario reads a lab scenario (Kubernetes objects plus one
// `kind: Scenario` document), checks it as the API server and the lab would
// check it, and resolves it into a plan.Plan: the first stage of a run
// (scenario -> runner -> verdict -> report). Nothing later reads the file.
package scenario

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIVersion and Kind identify the Scenario document.
const (
	APIVersion = "pinlab.dev/v1alpha1"
	Kind       = "Scenario"
)

// Scenario is the `kind: Scenario` document.
type Scenario struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata names the scenario.
type Metadata struct {
	Name string `json:"name"`
}

// Spec is what to run.
type Spec struct {
	// Description is shown above the report.
	Description string `json:"description,omitempty"`
	// Duration is how long load runs, per variant.
	Duration metav1.Duration `json:"duration"`
	// Clients are the load generators.
	Clients []Client `json:"clients"`
	// Timeline holds the steps applied during the run, by offset from the
	// start of load.
	Timeline []Step `json:"timeline,omitempty"`
	// Windows are the measurement intervals reported; default one window
	// over the whole run.
	Windows []Window `json:"windows,omitempty"`
	// Variants are named overlays run on the same timeline; default one
	// variant, "base", with no overlay.
	Variants []Variant `json:"variants,omitempty"`
	// GRPC holds process-wide grpc-go settings.
	GRPC GRPC `json:"grpc,omitempty"`
	// DNS configures the cluster DNS.
	DNS DNS `json:"dns,omitempty"`
	// Cluster holds dataplane and kubelet settings; variants may override
	// them.
	Cluster ClusterSettings `json:"cluster,omitempty"`
	// Sequential runs the variants one after another, as --sequential:
	// slower, but each variant then has the machine to itself, and the
	// report gives each one's CPU per 1000 calls (the cost of a proxy hop).
	Sequential bool `json:"sequential,omitempty"`
	// Expect lists what the run must show; each expectation is checked per
	// variant and reported as pass or fail.
	Expect []Expectation `json:"expect,omitempty"`
}

// Client is a group of identical load clients, named <name>-0 .. <name>-N-1.
type Client struct {
	Name string `json:"name"`
	// Namespace is the clients' namespace, used to complete short Service
	// names in Target as a pod's DNS search path would; default "default".
	Namespace string `json:"namespace,omitempty"`
	// Count is the number of clients, 1 to 1000; default 1.
	Count *int `json:"count,omitempty"`
	// Target is the gRPC target: "<service>[.<namespace>[.svc.cluster.local]]:<port>",
	// optionally with "dns:///" in front. Clients resolve it through the
	// lab's cluster DNS, as a pod would.
	Target string `json:"target"`
	// Policy is the load-balancing policy, pick_first (default) or round_robin.
	Policy string `json:"policy,omitempty"`
	// Rate is calls per second per client; must be > 0.
	Rate float64 `json:"rate"`
	// Timeout is each call's deadline, above zero; default (unset) 1s.
	// Zero is an error, not the default: a call with a zero deadline fails
	// before it is sent.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// ClientSettings model a client runtime: resolver, DNS cache, health
	// checking, retries, call kind.
	ClientSettings `json:",inline"`
}

// Step is one timeline action. Exactly one action field is set.
type Step struct {
	At metav1.Duration `json:"at"`
	// Name labels the step so expectations can refer to the pod it acted on
	// ("@<name>").
	Name            string               `json:"name,omitempty"`
	Scale           *ScaleStep           `json:"scale,omitempty"`
	RestartClient   *RestartClientStep   `json:"restartClient,omitempty"`
	ConfigureClient *ConfigureClientStep `json:"configureClient,omitempty"`
	RolloutRestart  *WorkloadRef         `json:"rolloutRestart,omitempty"`
	Update          *UpdateStep          `json:"update,omitempty"`
	DeletePod       *PodRef              `json:"deletePod,omitempty"`
	KillPod         *PodRef              `json:"killPod,omitempty"`
	HangPod         *PodRef              `json:"hangPod,omitempty"`
	ResumePod       *PodRef              `json:"resumePod,omitempty"`
	NotReady        *PodRef              `json:"notReady,omitempty"`
	Ready           *PodRef              `json:"ready,omitempty"`
	Unhealthy       *PodRef              `json:"unhealthy,omitempty"`
	Healthy         *PodRef              `json:"healthy,omitempty"`
}

// ScaleStep sets a Deployment's or a StatefulSet's replicas; exactly one of
// the two names is set.
type ScaleStep struct {
	Deployment  string `json:"deployment,omitempty"`
	StatefulSet string `json:"statefulSet,omitempty"`
	// Namespace defaults to the workload's namespace when the name is
	// unique in the file.
	Namespace string `json:"namespace,omitempty"`
	Replicas  *int32 `json:"replicas"`
}

// RestartClientStep replaces a client's channel, as a restarted client
// process would. Client is one client ("order-0") or a group ("order").
type RestartClientStep struct {
	Client string `json:"client"`
}

// Window is a named measurement interval [From, To).
type Window struct {
	Name string          `json:"name"`
	From metav1.Duration `json:"from"`
	To   metav1.Duration `json:"to"`
}

// Variant is a named overlay on the scenario.
type Variant struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Clients     []ClientOverlay `json:"clients,omitempty"`
	Servers     []ServerOverlay `json:"servers,omitempty"`
	// Patches change the file's objects for this variant (any field of a
	// Deployment, StatefulSet, Service, ...), as kubectl patch does; the
	// patched objects are checked as the originals are.
	Patches []Patch `json:"patches,omitempty"`
	// Cluster overrides the scenario's cluster settings that it sets.
	Cluster *ClusterSettings `json:"cluster,omitempty"`
}

// Patch changes one object of the file for a variant.
type Patch struct {
	// Target names the object; its namespace may be left out when the
	// kind and name are unique in the file.
	Target PatchTarget `json:"target"`
	// Type is "strategic" (default: a strategic merge patch, kubectl
	// patch's default, where lists such as containers merge by name),
	// "merge" (a JSON merge patch, RFC 7386: null deletes a field, lists
	// are replaced) or "json" (a JSON patch, RFC 6902: a list of
	// operations).
	Type string `json:"type,omitempty"`
	// Patch is the patch itself: a mapping for strategic and merge, a
	// list of operations for json.
	Patch json.RawMessage `json:"patch"`
}

// PatchTarget names an object of the file.
type PatchTarget struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// ClientOverlay changes client groups' target, policy, count, rate or
// settings, as a JSON merge patch (RFC 7386) on the group: unset fields
// keep the group's value and null removes it (retry: null turns the
// group's retries off). An empty Name applies to every group.
type ClientOverlay struct {
	Name           string  `json:"name,omitempty"`
	Target         string  `json:"target,omitempty"`
	Policy         string  `json:"policy,omitempty"`
	Count          *int    `json:"count,omitempty"`
	Rate           float64 `json:"rate,omitempty"`
	ClientSettings `json:",inline"`
}

// ServerOverlay sets grpc-go server options of a Deployment's or a
// StatefulSet's pods by rewriting its container args; exactly one of the two
// names is set.
type ServerOverlay struct {
	Deployment            string           `json:"deployment,omitempty"`
	StatefulSet           string           `json:"statefulSet,omitempty"`
	Namespace             string           `json:"namespace,omitempty"`
	MaxConnectionAge      *metav1.Duration `json:"maxConnectionAge,omitempty"`
	MaxConnectionAgeGrace *metav1.Duration `json:"maxConnectionAgeGrace,omitempty"`
	// MinReadySeconds sets the workload's spec.minReadySeconds: how long a
	// new pod must stay Ready before it counts as available and a rollout
	// moves on.
	MinReadySeconds *int32 `json:"minReadySeconds,omitempty"`
	// PreStopSleepSeconds sets the container's preStop hook to sleep that
	// long (lifecycle.preStop.sleep), so a terminating pod keeps serving
	// while the endpoint removal reaches kube-proxy and clients. It counts
	// against terminationGracePeriodSeconds.
	PreStopSleepSeconds *int64 `json:"preStopSleepSeconds,omitempty"`
}

// GRPC holds grpc-go settings. They are process-wide in grpc-go, so every
// variant of a run shares them.
type GRPC struct {
	// MinResolutionInterval is grpc-go's minimum time between DNS
	// resolutions of one channel (resolver/dns.SetMinResolutionInterval);
	// default 30s, grpc-go's own.
	MinResolutionInterval *metav1.Duration `json:"minResolutionInterval,omitempty"`
}

// DNS configures the cluster DNS.
type DNS struct {
	// TTL of answers; default 5s (CoreDNS); kubeadm clusters use 30s.
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// FixedOrder keeps A records in a stable order instead of shuffling them
	// per answer (CoreDNS loadbalance, on in kubeadm clusters).
	FixedOrder bool `json:"fixedOrder,omitempty"`
	// Pods is the pods mode for a-b-c-d.<ns>.pod.<zone> names: disabled
	// (default, as CoreDNS), insecure (kubeadm) or verified.
	Pods string `json:"pods,omitempty"`
	// Cache puts CoreDNS's cache plugin in front of the cluster DNS
	// (see DNSCache); default none.
	Cache *DNSCache `json:"cache,omitempty"`
}
