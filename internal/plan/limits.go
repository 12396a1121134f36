package plan

import "time"

// Limits that keep a run bounded and its numbers about Kubernetes rather
// than about the machine. Package scenario enforces them per variant; the
// runner enforces MaxOfferedLoad and MaxPods over variants running side by
// side.
const (
	// MaxDuration bounds a run: every load the lab makes stops by itself.
	MaxDuration = time.Hour
	// MaxClients bounds a client group's count.
	MaxClients = 1000
	// MaxReplicas bounds a workload's pods: each pod is a real server
	// (about 30 KiB and 2 goroutines idle, more under load), and a lab's
	// pod range is one /16.
	MaxReplicas = 1000
	// MaxPods bounds the pods of one variant (all workloads at their
	// largest over the timeline) and of all variants side by side: 1000
	// pods become ready in about 1 s on 2 cores (BenchmarkStartup).
	MaxPods = 1000
	// MaxOfferedLoad bounds the calls per second all clients offer
	// together, in one variant and in all variants side by side. Measured
	// on 2 cores with 3 pods: 8000 calls/s ran with no errors and p99
	// 20-27 ms; at 12000, round_robin queued (p50 27 ms); at 20000 most
	// calls missed their deadline.
	MaxOfferedLoad = 8000
)

// File descriptors a lab holds, by what opens them (the runner and lab up
// estimate a run's need from them before anything starts).
const (
	// FDsPerPod: a pod's gRPC listener, an HTTP listener, a probe's
	// connection.
	FDsPerPod = 3
	// FDsPerLab: the DNS sockets, the range claim, informers, logs and the
	// VIP listeners.
	FDsPerLab = 100
)

// DefaultMinResolutionInterval is grpc-go's own minimum time between DNS
// resolutions of a channel.
const DefaultMinResolutionInterval = 30 * time.Second
