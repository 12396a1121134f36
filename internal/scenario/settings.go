package scenario

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"google.golang.org/grpc/codes"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClientSettings model a client runtime. Unset fields keep the default (in
// a Client) or the group's value (in an overlay or a configureClient step).
type ClientSettings struct {
	// Resolver is how a dns:/// target is resolved: "grpc" (default:
	// grpc-go's own DNS resolver, re-resolving only when the balancer asks,
	// at most once per spec.grpc.minResolutionInterval), "cached" (the same
	// re-resolution rule per client, over a per-client DNS cache with
	// CacheTTL, as a JVM's InetAddress cache under grpc-java), "once"
	// (resolved at start into a static address list, never again) or
	// "kubernetes" (no DNS: the clients watch the target Service's
	// EndpointSlices through the lab's API with resolver/kubernetes, as a
	// service using a kubernetes:/// target does).
	Resolver string `json:"resolver,omitempty"`
	// PolicyConfig is the client's load-balancing policy's settings, with
	// grpc-go's service config names: choiceCount (least_request);
	// blackoutPeriod, weightUpdatePeriod, weightExpirationPeriod,
	// enableOobLoadReport, oobReportingPeriod, errorUtilizationPenalty
	// (weighted_round_robin); minRingSize, maxRingSize, requestHashHeader
	// (ring_hash).
	PolicyConfig json.RawMessage `json:"policyConfig,omitempty"`
	// CacheTTL is the "cached" resolver's cache lifetime: a duration or
	// "forever" (the JVM's networkaddress.cache.ttl=-1); default 30s, the
	// JVM's default without a security manager.
	CacheTTL *TTL `json:"cacheTTL,omitempty"`
	// MinResolutionInterval is the "cached" resolver's minimum time between
	// resolutions of one channel; default 30s, as grpc-go.
	MinResolutionInterval *metav1.Duration `json:"minResolutionInterval,omitempty"`
	// HealthCheck turns on gRPC client-side health checking
	// (healthCheckConfig for pricing.v1.Pricing); it acts under round_robin.
	HealthCheck *bool `json:"healthCheck,omitempty"`
	// WaitForReady makes calls wait for a ready connection until their
	// deadline instead of failing fast.
	WaitForReady *bool `json:"waitForReady,omitempty"`
	// Retry is a gRPC retry policy for pricing.v1.Pricing.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Call is "unary" (default: GetPrice) or "stream" (WatchPrices server
	// streams, each lasting StreamLength; Rate is then streams started per
	// second).
	Call string `json:"call,omitempty"`
	// StreamLength is how long each stream runs; default 10s.
	StreamLength *metav1.Duration `json:"streamLength,omitempty"`
	// L7Proxy puts a per-request (L7) proxy between the clients and their
	// target Service, as a service mesh or a gateway does.
	L7Proxy *L7Proxy `json:"l7Proxy,omitempty"`
	// Protocol is what the clients speak: "grpc" (default), "http" (HTTP/1.1
	// GET /v1/price through a Go net/http keep-alive pool) or "websocket"
	// (one WebSocket per client, a message per call). The target's port
	// must then be the pods' HTTP port (pod arg --http-port, or a container
	// port named http).
	Protocol string `json:"protocol,omitempty"`
	// MaxIdleConnsPerHost and MaxConnsPerHost size the http pool, as Go's
	// http.Transport fields; defaults 2 (net/http's) and no limit.
	MaxIdleConnsPerHost *int `json:"maxIdleConnsPerHost,omitempty"`
	MaxConnsPerHost     *int `json:"maxConnsPerHost,omitempty"`
}

// Protocols are the values of ClientSettings.Protocol.
var Protocols = []string{"grpc", "http", "websocket"}

// L7Proxy places the lab's L7 gRPC proxy (package l7proxy) in front of a
// client group's target Service.
type L7Proxy struct {
	// Placement is "sidecar" (default: one proxy per client on the client's
	// own IP, which the client dials on loopback, as Linkerd's and Istio's
	// sidecars) or "gateway" (Replicas shared proxies, each on its own pod
	// IP, behind a ClusterIP Service <service>-l7gw that the clients dial,
	// as an ingress or gateway Deployment).
	Placement string `json:"placement,omitempty"`
	// Policy picks the pod for each call: round_robin (default, Envoy's),
	// least_request (Envoy's two random choices) or peak_ewma (Linkerd's).
	Policy string `json:"policy,omitempty"`
	// Replicas is the number of gateway proxies; default 1.
	Replicas int `json:"replicas,omitempty"`
}

// L7 proxy placements.
var placements = []string{"sidecar", "gateway"}

// RetryPolicy is gRPC's retryPolicy service-config object.
type RetryPolicy struct {
	// MaxAttempts counts the first call; 2 to 5 (grpc-go caps it at 5).
	MaxAttempts          int             `json:"maxAttempts"`
	InitialBackoff       metav1.Duration `json:"initialBackoff"`
	MaxBackoff           metav1.Duration `json:"maxBackoff"`
	BackoffMultiplier    float64         `json:"backoffMultiplier"`
	RetryableStatusCodes []string        `json:"retryableStatusCodes"`
}

// TTL is a cache lifetime: a duration, or "forever" (Forever).
type TTL struct {
	time.Duration
}

// Forever is the TTL of a cache that never expires.
const Forever = time.Duration(-1)

// UnmarshalJSON reads "forever" or a Go duration such as "30s".
func (t *TTL) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		// A number without a unit, most likely; quoted so the error can be
		// placed at the value.
		return fmt.Errorf("invalid cache TTL %q", string(b))
	}
	if strings.EqualFold(s, "forever") {
		t.Duration = Forever
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("invalid cache TTL %q", s)
	}
	t.Duration = d
	return nil
}

// MarshalJSON writes the form UnmarshalJSON reads.
func (t TTL) MarshalJSON() ([]byte, error) {
	if t.Duration == Forever {
		return json.Marshal("forever")
	}
	return json.Marshal(t.Duration.String())
}

func (t TTL) String() string {
	if t.Duration == Forever {
		return "forever"
	}
	return t.Duration.String()
}

// ClusterSettings are the lab's dataplane and kubelet settings.
type ClusterSettings struct {
	// ProxyMode is kube-proxy's mode: "iptables" (default) and "nftables"
	// pick a uniform random endpoint per new connection; "ipvs" uses IPVS's
	// default rr scheduler (round robin per new connection).
	ProxyMode string `json:"proxyMode,omitempty"`
	// DeadAddress is what a connect to a deleted pod's address gets:
	// "refuse" (default; nothing listens, so the kernel answers RST) or
	// "blackhole" (no answer; the connect times out), as both happen in
	// real clusters depending on the CNI.
	DeadAddress string `json:"deadAddress,omitempty"`
	// RestartBackoff is the kubelet's first crash-loop back-off before a
	// killed container restarts; default 10s, as the kubelet.
	RestartBackoff *metav1.Duration `json:"restartBackoff,omitempty"`
}

// overlay returns s with the fields o sets replaced.
func (s ClusterSettings) overlay(o *ClusterSettings) ClusterSettings {
	if o == nil {
		return s
	}
	if o.ProxyMode != "" {
		s.ProxyMode = o.ProxyMode
	}
	if o.DeadAddress != "" {
		s.DeadAddress = o.DeadAddress
	}
	if o.RestartBackoff != nil {
		s.RestartBackoff = o.RestartBackoff
	}
	return s
}

// WorkloadRef names a Deployment or a StatefulSet; exactly one of the two
// names is set. Namespace defaults to the workload's when the name is
// unique in the file.
type WorkloadRef struct {
	Deployment  string `json:"deployment,omitempty"`
	StatefulSet string `json:"statefulSet,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
}

// UpdateStep changes a workload's pod template, which starts a rollout
// (the workload's update strategy applies).
type UpdateStep struct {
	WorkloadRef `json:",inline"`
	// Image replaces the container image (it must still be pinlab, e.g.
	// pinlab:v2).
	Image string `json:"image,omitempty"`
	// Args replaces the container args.
	Args []string `json:"args,omitempty"`
}

// ConfigureClientStep changes running clients' settings, as a redeployed
// client with a new configuration would: new calls use a new channel. It
// applies as a JSON merge patch on each client's settings at that point of
// the timeline: null removes a setting.
type ConfigureClientStep struct {
	// Client is one client ("order-0") or a group ("order").
	Client         string  `json:"client"`
	Policy         string  `json:"policy,omitempty"`
	Rate           float64 `json:"rate,omitempty"`
	ClientSettings `json:",inline"`
}

// PodRef picks the pod a step acts on: one pod by name, or one of a
// workload's running pods chosen by Pick.
type PodRef struct {
	// Pod names the pod, e.g. db-0, or "@<step name>" for the pod an
	// earlier step acted on.
	Pod         string `json:"pod,omitempty"`
	Deployment  string `json:"deployment,omitempty"`
	StatefulSet string `json:"statefulSet,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	// Pick chooses among the workload's pods that are not terminating:
	// "busiest" (default: most calls served so far), "quietest", "oldest"
	// or "newest".
	Pick string `json:"pick,omitempty"`
	// GracePeriodSeconds overrides the pod's terminationGracePeriodSeconds
	// for deletePod, as kubectl delete --grace-period.
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
}

// Expectation is a bound on one measured value, checked for each variant
// it applies to after the run.
type Expectation struct {
	// Name says what is expected; it heads the pass/fail line.
	Name string `json:"name"`
	// Variants the expectation applies to; default all.
	Variants []string `json:"variants,omitempty"`
	// Window names the measurement window of a window metric.
	Window string `json:"window,omitempty"`
	// Group narrows a window metric to one client group: the pods of the
	// Service it targets and its own clients' calls and connections.
	Group string `json:"group,omitempty"`
	// Metric is one of Metrics.
	Metric string `json:"metric"`
	// Pod names the pod of a pod metric: a pod name, or "@<step name>" for
	// the pod a timeline step acted on.
	Pod string `json:"pod,omitempty"`
	// Code and Cause narrow the "failed" metric to one status code (e.g.
	// Unavailable) or cause (e.g. refused).
	Code  string `json:"code,omitempty"`
	Cause string `json:"cause,omitempty"`
	// AtLeast and AtMost bound the value; at least one is set.
	AtLeast *float64 `json:"atLeast,omitempty"`
	AtMost  *float64 `json:"atMost,omitempty"`
}

// Resolvers are the values of ClientSettings.Resolver.
var Resolvers = []string{"grpc", "cached", "once", "kubernetes"}

// checkSettings validates client settings; at places the errors.
func checkSettings(at site, s ClientSettings) error {
	if s.Resolver != "" && !slices.Contains(Resolvers, s.Resolver) {
		return at.Errorf("resolver", "%q: expected one of %s", s.Resolver, strings.Join(Resolvers, ", "))
	}
	if s.CacheTTL != nil && s.Resolver != "cached" {
		return at.Errorf("cacheTTL", "applies only with resolver: cached")
	}
	if m := s.MinResolutionInterval; m != nil && (m.Duration < 0 || s.Resolver != "cached") {
		return at.Errorf("minResolutionInterval", "applies only with resolver: cached (grpc-go's own resolver takes spec.grpc.minResolutionInterval), and must not be negative")
	}
	if err := checkRetry(at.child("retry"), s.Retry); err != nil {
		return err
	}
	switch s.Call {
	case "", "unary", "stream":
	default:
		return at.Errorf("call", "%q: expected unary or stream", s.Call)
	}
	if l := s.StreamLength; l != nil && (l.Duration <= 0 || s.Call != "stream") {
		return at.Errorf("streamLength", "applies only with call: stream, and must be positive")
	}
	if s.Protocol != "" && !slices.Contains(Protocols, s.Protocol) {
		return at.Errorf("protocol", "%q: expected one of %s", s.Protocol, strings.Join(Protocols, ", "))
	}
	if s.Protocol == "http" || s.Protocol == "websocket" {
		grpcOnly := map[string]bool{"resolver": s.Resolver != "", "healthCheck": s.HealthCheck != nil, "waitForReady": s.WaitForReady != nil,
			"retry": s.Retry != nil, "call": s.Call != "", "l7Proxy": s.L7Proxy != nil}
		for _, k := range []string{"resolver", "healthCheck", "waitForReady", "retry", "call", "l7Proxy"} {
			if grpcOnly[k] {
				return at.Errorf(k, "applies to gRPC clients only, not protocol %s", s.Protocol)
			}
		}
	}
	for name, v := range map[string]*int{"maxIdleConnsPerHost": s.MaxIdleConnsPerHost, "maxConnsPerHost": s.MaxConnsPerHost} {
		if v != nil && (*v < 0 || *v > 1000 || s.Protocol != "http") {
			return at.Errorf(name, "%d: 0 to 1000, only with protocol: http", *v)
		}
	}
	if s.Resolver == "kubernetes" && s.L7Proxy != nil {
		return at.Errorf("resolver", "kubernetes: clients behind an L7 proxy dial the proxy, which resolves the Service itself")
	}
	return checkL7Proxy(at.child("l7Proxy"), s.L7Proxy)
}

// checkRetry validates a retry policy (nil: none).
func checkRetry(at site, r *RetryPolicy) error {
	if r == nil {
		return nil
	}
	if r.MaxAttempts < 2 || r.MaxAttempts > 5 {
		return at.Errorf("maxAttempts", "%d: expected 2 to 5 (grpc-go caps attempts at 5)", r.MaxAttempts)
	}
	if r.InitialBackoff.Duration <= 0 || r.MaxBackoff.Duration < r.InitialBackoff.Duration {
		return at.Errorf("", "expected initialBackoff > 0 and maxBackoff >= initialBackoff")
	}
	if r.BackoffMultiplier <= 0 {
		return at.Errorf("backoffMultiplier", "%v: expected > 0", r.BackoffMultiplier)
	}
	if len(r.RetryableStatusCodes) == 0 {
		return at.Errorf("retryableStatusCodes", "required, e.g. [Unavailable]")
	}
	for i, c := range r.RetryableStatusCodes {
		if statusCodes[c] == codes.OK {
			return at.Errorf(fmt.Sprintf("retryableStatusCodes[%d]", i), "%q: expected a gRPC status code name such as Unavailable", c)
		}
	}
	return nil
}

// checkL7Proxy validates an L7 proxy setting (nil: none).
func checkL7Proxy(at site, x *L7Proxy) error {
	if x == nil {
		return nil
	}
	if x.Placement != "" && !slices.Contains(placements, x.Placement) {
		return at.Errorf("placement", "%q: expected sidecar or gateway", x.Placement)
	}
	if x.Policy != "" && !slices.Contains(plan.ProxyPolicies, x.Policy) {
		return at.Errorf("policy", "%q: expected one of %s", x.Policy, strings.Join(plan.ProxyPolicies, ", "))
	}
	if x.Replicas < 0 || x.Replicas > 10 || x.Replicas > 0 && x.Placement != "gateway" {
		return at.Errorf("replicas", "%d: gateway replicas, 1 to 10, only with placement: gateway", x.Replicas)
	}
	return nil
}

// ProxyModes and DeadAddresses are the values of ClusterSettings' fields.
var (
	ProxyModes    = []string{"iptables", "nftables", "ipvs"}
	DeadAddresses = []string{"refuse", "blackhole"}
)

func checkCluster(at site, c ClusterSettings) error {
	if c.ProxyMode != "" && !slices.Contains(ProxyModes, c.ProxyMode) {
		return at.Errorf("proxyMode", "%q: expected one of %s", c.ProxyMode, strings.Join(ProxyModes, ", "))
	}
	if c.DeadAddress != "" && !slices.Contains(DeadAddresses, c.DeadAddress) {
		return at.Errorf("deadAddress", "%q: expected one of %s", c.DeadAddress, strings.Join(DeadAddresses, ", "))
	}
	if b := c.RestartBackoff; b != nil && b.Duration <= 0 {
		return at.Errorf("restartBackoff", "%v: expected a positive duration", b.Duration)
	}
	return nil
}

// Defaults of client settings, as the runtimes they model.
const (
	defaultCacheTTL       = 30 * time.Second // the JVM's without a security manager
	defaultMinResolution  = 30 * time.Second // grpc-go's
	defaultStreamLength   = 10 * time.Second
	defaultMaxIdleConns   = 2 // net/http's DefaultMaxIdleConnsPerHost
	defaultRestartBackoff = 10 * time.Second
	defaultDNSTTL         = 5 * time.Second // CoreDNS's kubernetes plugin
	defaultCallTimeout    = time.Second
	defaultPolicy         = "pick_first"
	defaultL7Placement    = "sidecar"
	defaultL7Policy       = "round_robin"
	defaultProxyMode      = "iptables"
	defaultDeadAddress    = "refuse"
	defaultResolver       = "grpc"
	defaultProtocol       = "grpc"
	defaultPodPick        = "busiest"
	defaultPatchType      = "strategic"
	defaultDNSPodsMode    = "disabled"
	defaultRunWindowName  = "run"
	defaultVariantName    = "base"
)

// resolve returns s, checked, with every default applied.
func (s ClientSettings) resolve() plan.Settings {
	out := plan.Settings{
		Protocol:            cmp.Or(s.Protocol, defaultProtocol),
		Resolver:            cmp.Or(s.Resolver, defaultResolver),
		HealthCheck:         s.HealthCheck != nil && *s.HealthCheck,
		WaitForReady:        s.WaitForReady != nil && *s.WaitForReady,
		Stream:              s.Call == "stream",
		MaxIdleConnsPerHost: defaultMaxIdleConns,
		Described:           s.describe(),
	}
	if len(s.PolicyConfig) > 0 {
		out.PolicySettings = compactJSON(s.PolicyConfig)
	}
	if out.Resolver == "cached" {
		out.CacheTTL, out.MinResolutionInterval = defaultCacheTTL, defaultMinResolution
		if s.CacheTTL != nil {
			out.CacheTTL = s.CacheTTL.Duration // Forever is plan.Forever
		}
		if s.MinResolutionInterval != nil {
			out.MinResolutionInterval = s.MinResolutionInterval.Duration
		}
	}
	if out.Stream {
		out.StreamLength = defaultStreamLength
		if s.StreamLength != nil {
			out.StreamLength = s.StreamLength.Duration
		}
	}
	if r := s.Retry; r != nil {
		out.Retry = &plan.Retry{MaxAttempts: r.MaxAttempts, InitialBackoff: r.InitialBackoff.Duration, MaxBackoff: r.MaxBackoff.Duration, BackoffMultiplier: r.BackoffMultiplier}
		for _, c := range r.RetryableStatusCodes {
			out.Retry.RetryableStatusCodes = append(out.Retry.RetryableStatusCodes, statusCodes[c])
		}
	}
	if x := s.L7Proxy; x != nil {
		out.L7Proxy = &plan.L7Proxy{Placement: cmp.Or(x.Placement, defaultL7Placement), Policy: cmp.Or(x.Policy, defaultL7Policy), Replicas: max(x.Replicas, 1)}
	}
	if v := s.MaxIdleConnsPerHost; v != nil {
		out.MaxIdleConnsPerHost = *v
	}
	if v := s.MaxConnsPerHost; v != nil {
		out.MaxConnsPerHost = *v
	}
	return out
}

// resolve returns c, checked, with every default applied.
func (c ClusterSettings) resolve() plan.Cluster {
	out := plan.Cluster{ProxyMode: cmp.Or(c.ProxyMode, defaultProxyMode), DeadAddress: cmp.Or(c.DeadAddress, defaultDeadAddress), RestartBackoff: defaultRestartBackoff}
	if c.RestartBackoff != nil {
		out.RestartBackoff = c.RestartBackoff.Duration
	}
	return out
}

// statusCodes are gRPC codes by their String() names (Unavailable).
var statusCodes = func() map[string]codes.Code {
	m := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[c.String()] = c
	}
	return m
}()
