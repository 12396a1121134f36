// Package evidence gathers what `pinlab diagnose` judges, for one Service:
// its objects (Service, EndpointSlices, the pods it selects and every other
// pod and Service, from a Source such as a running lab's control API or a
// kubeconfig) and, from each of its pods' grpc.channelz.v1 service, readings
// once a second over a window: the server's call counts and its connections
// with their remote addresses and per-connection call counts. It does I/O
// and judges nothing; package diagnose turns an Evidence into a verdict.
//
// Data flows one way: Source -> Collect -> Evidence. An Evidence is plain
// data (JSON-ready) and is not changed after Collect returns.
package evidence

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Objects are the API objects a Source lists (every namespace).
// Deployments and StatefulSets are optional: they only name the workload
// of a Service without pods (scaled to 0, say).
type Objects struct {
	Services       []corev1.Service
	Pods           []corev1.Pod
	EndpointSlices []discoveryv1.EndpointSlice
	Deployments    []appsv1.Deployment
	StatefulSets   []appsv1.StatefulSet
}

// Source lists a cluster's objects. Implementations: the lab's control API
// (in package cli) and a kubeconfig (Kube).
type Source interface {
	// Objects lists Services, Pods and EndpointSlices of every namespace.
	// It honours ctx and returns an error saying what was tried.
	Objects(ctx context.Context) (Objects, error)
	// String names the source for the report ("lab at 127.0.0.1:7471").
	String() string
}

// Evidence is what was observed of one Service.
type Evidence struct {
	// Source names where the objects came from.
	Source string `json:"source"`
	// RatesFrom says where the per-pod counts came from: "channelz",
	// "prometheus" or "agent" (pinlab-agent's byte counts).
	RatesFrom string `json:"rates_from"`
	// Unit is what the pods' and connections' counts (Calls.Started,
	// Conn.Calls) count: "calls", or "bytes" (both ways) when RatesFrom is
	// "agent".
	Unit string `json:"unit"`
	// Service is the Service diagnosed.
	Service Service `json:"service"`
	// Siblings are the other Services of the namespace that select the
	// same pods (a headless twin of a ClusterIP Service, say).
	Siblings []Service `json:"siblings,omitempty"`
	// Window is the time from the first reading of the pods to the last,
	// as measured (the median over the pods); zero when no pod could be
	// read twice. Readings is how many readings were taken of each pod.
	Window   time.Duration `json:"window_ns"`
	Readings int           `json:"readings,omitempty"`
	// Pods are the Service's pods: the pods its selector matches, else the
	// pods named by its EndpointSlices; sorted by name.
	Pods []Pod `json:"pods"`
	// Peers name the addresses seen as remote ends of the pods'
	// connections, when they are known: a pod (any namespace) or an
	// endpoint of another Service (a gateway, say). Keyed by IP.
	Peers map[string]Peer `json:"peers,omitempty"`
	// Queries are the PromQL queries run, when RatesFrom is "prometheus".
	Queries []string `json:"queries,omitempty"`
	// Problems are what could not be collected (a pod without channelz, an
	// unreachable Prometheus), each a sentence; the rest is still there.
	Problems []string `json:"problems,omitempty"`
}

// Service is the part of a Service that diagnosis reads.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Type is spec.type ("ClusterIP" when empty).
	Type string `json:"type"`
	// ClusterIP is spec.clusterIP: an address, or "None" for a headless
	// Service.
	ClusterIP string            `json:"cluster_ip"`
	Selector  map[string]string `json:"selector,omitempty"`
	// Ports are the Service's ports; Port is the one diagnosed, as
	// "name:port" (or "port" when unnamed).
	Ports []int32 `json:"ports"`
	Port  string  `json:"port,omitempty"`
	// Annotations are the Service's annotations.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Endpoints is how many endpoints its EndpointSlices list, and Ready
	// how many of them are ready.
	Endpoints int `json:"endpoints"`
	Ready     int `json:"ready"`
	// Workloads are the Deployments and StatefulSets of the namespace
	// whose pod template the selector matches, when the Source lists them.
	Workloads []Workload `json:"workloads,omitempty"`
}

// Workload is a Deployment or StatefulSet whose pods a Service selects.
type Workload struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Replicas int32  `json:"replicas"`
	// ServiceName is a StatefulSet's spec.serviceName: the headless
	// Service that gives each of its pods a DNS name of its own.
	ServiceName string `json:"service_name,omitempty"`
}

// Headless reports whether the Service has no ClusterIP.
func (s Service) Headless() bool { return s.ClusterIP == corev1.ClusterIPNone }

// Pod is one of the Service's pods and what it served during the window.
type Pod struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
	// Ready is the pod's Ready condition; ReadySince is when it last
	// turned true (zero when not ready or unknown), Created its creation
	// time.
	Ready      bool      `json:"ready"`
	ReadySince time.Time `json:"ready_since,omitzero"`
	Created    time.Time `json:"created,omitzero"`
	// Containers are the names of the pod's containers (sidecars
	// included); Annotations and Labels are the pod's.
	Containers  []string          `json:"containers"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Addr is the "IP:port" of the pod's gRPC server that was sampled.
	Addr string `json:"addr,omitempty"`
	// Err says why the pod's calls could not be measured (no channelz,
	// refused, timed out, no Prometheus series); empty when they were.
	Err string `json:"error,omitempty"`
	// ConnsErr says why its connections could not be read from channelz
	// when its calls came from Prometheus.
	ConnsErr string `json:"conns_error,omitempty"`
	// Calls counts the server's calls during the window (with Unit
	// "bytes", Started is bytes and the others 0): from its first
	// good reading to its last, Span apart (the Evidence's Window when a
	// reading failed at neither end).
	Calls Calls         `json:"calls"`
	Span  time.Duration `json:"span_ns,omitempty"`
	// Conns are the server's client connections seen open in any
	// reading, the sampler's own left out; sorted by remote address.
	Conns []Conn `json:"conns"`
	// Health is the server's grpc.health.v1 status at the end of the
	// window: "NOT_SERVING" when the overall status or any service's is,
	// else the overall one ("SERVING"); empty when unknown.
	Health string `json:"health,omitempty"`
}

// Sampled reports whether the pod's calls were measured.
func (p Pod) Sampled() bool { return p.Err == "" }

// Calls are call counts over the window: calls started, and of the
// finished ones, those that succeeded and failed.
type Calls struct {
	Started   int64 `json:"started"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
}

// Conn is one client connection of a pod's server.
type Conn struct {
	// Remote is the client's "IP:port" as the server sees it.
	Remote string `json:"remote"`
	// Calls are the calls (streams) started on it during the window (all
	// of them if it opened during the window); Total since it opened.
	// Bytes both ways when the Evidence's Unit is "bytes".
	Calls int64 `json:"calls"`
	Total int64 `json:"total"`
	// New is true when the connection opened during the window, Closed
	// when it was gone at the last reading.
	New    bool `json:"new,omitempty"`
	Closed bool `json:"closed,omitempty"`
	// Life is how long it was seen open within the window: from the
	// first reading (or, for a New one, the reading before it appeared)
	// to the last reading that saw it. Zero when unknown (then the
	// window is its life).
	Life time.Duration `json:"life_ns,omitempty"`
}

// Peer is a known remote address.
type Peer struct {
	// Kind is "pod" or "endpoint" (an address of another Service's
	// EndpointSlice, such as a gateway's) or "node" (the lab's node
	// address, where kubelet probes and host processes come from).
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	// Name is the pod's name, or the Service's for an endpoint.
	Name string `json:"name"`
	// Containers and Annotations are the pod's, for a pod.
	Containers  []string          `json:"containers,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}
