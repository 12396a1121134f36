package runner

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/proxy"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// Backend starts the cluster each variant runs on: the runner never asks
// which. Run calls Start once per variant (concurrently when variants run
// side by side) and closes what it returns once the variant is over.
//
// The implementations, each in the package that owns that kind of
// cluster, are siblings:
//   - package labrun's embedded backend: a lab (package lab) on the
//     embedded API and controllers, in this process;
//   - package labrun's control-plane backend: a lab on a real
//     kube-apiserver, kube-controller-manager and kube-scheduler of its
//     own, started by package kubelab in the lab's network namespace, with
//     pinlab's dataplane or the kernel's (the real kube-proxy and CoreDNS);
//   - a remote cluster (the one a kubeconfig names) goes beside them in a
//     package of its own: its Start creates the variant's namespace and
//     returns a Cluster whose API is that cluster's, whose Node acts on
//     pods through the API server (exec, port-forward, delete), and whose
//     DNSAddr is the cluster's DNS as the load clients reach it.
type Backend interface {
	// Start starts the cluster a variant runs on, with s's settings and
	// hooks, and returns once its API and dataplane serve (its cluster
	// DNS answers). It may wait for room (s.State says so); it returns
	// ctx's error once ctx ends.
	Start(ctx context.Context, s Setup) (Cluster, error)
	// MaxClusters is how many of its clusters one machine runs at once
	// (0: no bound); Run runs side-by-side variants in batches of at most
	// that many.
	MaxClusters() int
}

// Setup is what a variant's cluster is started with.
type Setup struct {
	// Index is the variant's position in the plan; Variant the variant.
	Index   int
	Variant plan.Variant
	// DNS is the plan's cluster DNS (TTL, order, pods mode, cache).
	DNS plan.DNS
	// Seed makes the cluster's names, addresses and random picks
	// repeatable.
	Seed uint64
	// Logger receives the components' logs; never nil.
	Logger *slog.Logger
	// State, if not nil, is told what Start waits for ("waiting for a free
	// address range", "starting its control plane"), for the progress
	// line; from Start's goroutine.
	State func(string)
	// Hooks report what happens in the cluster as it happens.
	Hooks Hooks
}

// Hooks are how a cluster reports what happens in it. Each may be nil;
// each is called from the component's own goroutines, often (Pod's
// observers on every call), so it must return quickly and never block.
type Hooks struct {
	// Pod returns the observer of what pod p's server serves (calls and
	// connections), or nil when p is not measured; called as each pod's
	// server starts.
	Pod func(p *corev1.Pod) pod.Observer
	// PodEvent reports a kubelet event on pod p ("sigterm", "killed",
	// "restarted", a probe failing, ...) at the time it happened.
	PodEvent func(p *corev1.Pod, event string, at time.Time)
	// DNSQuery reports each answer the cluster DNS sends.
	DNSQuery func(clusterdns.QueryEvent)
	// Conn reports each connection the dataplane opens to or closes from
	// a Service's endpoint through its ClusterIP (a relay, or a conntrack
	// entry the kernel DNATed).
	Conn func(proxy.Conn, proxy.ConnEvent)
}

// Cluster is a running cluster one variant runs on, as the runner uses
// it: its API (as kubectl and client-go use it), its node (what only the
// node's kubelet can do to a pod) and its dataplane (the cluster DNS).
type Cluster interface {
	API
	Node
	// DNSAddr is the cluster DNS's "IP:port", which the load clients
	// resolve Service names with.
	DNSAddr() string
	// SyncDNSLog returns once every DNS answer sent before the call has
	// reached Hooks.DNSQuery (some DNS servers report them late).
	SyncDNSLog(ctx context.Context) error
	// Failed is closed when a part of the cluster stops while it runs (a
	// component, a process of the control plane or the dataplane): what
	// it serves no longer follows its API, so the variant stops; Err then
	// says what failed.
	Failed() <-chan struct{}
	Err() error
	// Close stops the cluster and everything Start started for it, and
	// waits for them.
	Close() error
}

// API is a cluster's Kubernetes API as the runner uses it. Changes return
// once the cluster's informers hold what they wrote.
type API interface {
	// Apply creates or patches objects as kubectl apply does.
	Apply(ctx context.Context, objs []runtime.Object) error
	// WaitReady waits until every workload's pods are Ready and the
	// dataplane serves every Service's ready endpoints.
	WaitReady(ctx context.Context) error
	// Scale, UpdateTemplate and RolloutRestart change a Deployment or
	// StatefulSet (kind) as kubectl scale, edit and rollout restart do.
	Scale(ctx context.Context, kind, namespace, name string, replicas int32) error
	UpdateTemplate(ctx context.Context, kind, namespace, name string, edit func(*corev1.PodTemplateSpec)) error
	RolloutRestart(ctx context.Context, kind, namespace, name string) error
	// DeletePod deletes a pod gracefully, as kubectl delete pod; grace
	// overrides its terminationGracePeriodSeconds (nil keeps it).
	DeletePod(ctx context.Context, namespace, name string, grace *int64) error
	// Client is the API's client (for the "kubernetes" resolver).
	Client() kubernetes.Interface
	// Informers are the cluster's shared informers; StartInformers starts
	// those added since (an L7 proxy's), until the cluster closes.
	Informers() informers.SharedInformerFactory
	StartInformers()
	// PodCIDR is the pod network.
	PodCIDR() netip.Prefix
}

// Node is what the runner asks of the node a cluster's pods run on: what
// kubectl cannot do (a container killed or hung, a probe made to fail),
// and addresses for clients that should look like pods.
type Node interface {
	// KillPod kills the pod's container (SIGKILL); HangPod stops or
	// resumes its answers; SetPodReady and SetPodHealthy make its
	// readiness or liveness probe pass or fail.
	KillPod(namespace, name string) error
	HangPod(namespace, name string, hang bool) error
	SetPodReady(namespace, name string, ready bool) error
	SetPodHealthy(namespace, name string, healthy bool) error
	// AllocateIP takes a free pod address for a load client or a proxy.
	AllocateIP() (netip.Addr, error)
	// NodeIP is the node's address, the source of the kubelet's probes.
	NodeIP() netip.Addr
}

// dataplaneNamer is a Cluster that can say what serves its ClusterIPs,
// recorded in the variant's Outcome (a real control plane's clusters do:
// pinlab's dataplane or the kernel's).
type dataplaneNamer interface {
	DataplaneName() string
}
