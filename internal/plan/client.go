package plan

import (
	"cmp"
	"fmt"
	"time"

	"github.com/pinlab/pinlab/internal/lbpolicy"
	"google.golang.org/grpc/codes"
)

// Policies are the load-balancing policies a gRPC client may use
// (Group.Policy, Client.Policy), by the names lbpolicy gives grpc-go's:
// pick_first (grpc-go's default), round_robin, least_request,
// weighted_round_robin and ring_hash. Package load runs each.
var Policies = lbpolicy.Names

// ProxyPolicies are the load-balancing policies of the lab's L7 proxy
// (L7Proxy.Policy), by their Envoy names: round_robin (Envoy's default),
// least_request and peak_ewma (Linkerd's balancer). Package l7proxy
// implements each.
var ProxyPolicies = []string{"round_robin", "least_request", "peak_ewma"}

// Group is a client group as a variant runs it.
type Group struct {
	Name string
	// Clients is the number of clients, named <Name>-0 .. <Name>-(N-1).
	Clients int
	Target  Target
	Policy  string
	// Rate is calls (or streams) per second per client.
	Rate     float64
	Timeout  time.Duration
	Settings Settings
}

// Client is one load client: a group member with the group's settings, as
// changed by configureClient steps up to a point of the timeline.
type Client struct {
	Name, Group string
	Target      Target
	// Policy is one of Policies; for an xDS target, the one its Service's
	// annotations choose (the control plane's, not the client's).
	Policy string
	// Rate is calls (or streams) per second; Timeout each call's deadline.
	Rate     float64
	Timeout  time.Duration
	Settings Settings
}

// Target is the Service a client dials, resolved against the file.
type Target struct {
	// URI, if set, is a grpc-go target to dial as it is, such as a
	// dns://... or passthrough:///... target `lab load` is given; it
	// overrides Host and Port. Scenarios never set it.
	URI                string
	Namespace, Service string
	// Host is the Service's FQDN without the trailing dot.
	Host string
	// Port is the port the client dials: a Service port for a ClusterIP
	// Service, the pods' port for a headless one.
	Port int
	// Headless is true for a Service with clusterIP None.
	Headless bool
	// XDS: the client dials xds:///SERVICE.NAMESPACE:PORT (XDSTarget),
	// and Port is a Service port, as the control plane names them.
	XDS bool
	// OutlierDetection, for an XDS target, is the outlier detection the
	// Service's annotation gives its clients; nil for none.
	OutlierDetection *lbpolicy.OutlierDetection
	// XDSAnnotated, for an XDS target: the Service carries
	// xds.pinlab.dev annotations (else the control plane serves its
	// defaults: round_robin, no outlier detection).
	XDSAnnotated bool
	// Selector is the Service's selector; nil for a selector-less Service
	// (hand-written EndpointSlices).
	Selector map[string]string
	// PortName names the Service port the client dials (the key
	// EndpointSlice ports carry).
	PortName string
	// MaxConnectionAge is the grpc-go MaxConnectionAge the Service's pods
	// are configured with at the start (0: none).
	MaxConnectionAge time.Duration
	// ClientIPAffinity is true for a Service with sessionAffinity ClientIP:
	// kube-proxy sends a client's new connections to the pod it had.
	ClientIPAffinity bool
	// PeakPods is the most pods the Service selects at once over the
	// timeline (its workloads at their largest replica counts; 0 for a
	// selector-less Service).
	PeakPods int
}

// Key is "namespace/name" of the target Service.
func (t Target) Key() string { return t.Namespace + "/" + t.Service }

// Kind is "headless" or "ClusterIP".
func (t Target) Kind() string {
	if t.Headless {
		return "headless"
	}
	return "ClusterIP"
}

// GRPCTarget returns the grpc-go target that resolves through the DNS
// server at dnsAddr, or the URI as it is.
func (t Target) GRPCTarget(dnsAddr string) string {
	if t.URI != "" {
		return t.URI
	}
	return fmt.Sprintf("dns://%s/%s:%d", dnsAddr, t.Host, t.Port)
}

// XDSTarget returns the xds:/// target of the Service port, as package
// xds names it: xds:///SERVICE.NAMESPACE:PORT.
func (t Target) XDSTarget() string {
	return fmt.Sprintf("xds:///%s.%s:%d", t.Service, t.Namespace, t.Port)
}

// KubernetesTarget returns the kubernetes:// target of the Service, for a
// resolver that watches its EndpointSlices: the port by the Service port's
// name, which each slice maps to the pods' port (a ClusterIP client's port
// is the Service's, not the pods'); without a name, each slice's first
// port.
func (t Target) KubernetesTarget() string {
	s := fmt.Sprintf("kubernetes://%s/%s", t.Namespace, t.Service)
	if t.PortName != "" {
		s += ":" + t.PortName
	}
	return s
}

// Protocols a client speaks.
const (
	ProtocolGRPC      = "grpc"
	ProtocolHTTP      = "http"
	ProtocolWebSocket = "websocket"
)

// Forever is the CacheTTL of a cache that never expires.
const Forever = time.Duration(-1)

// Settings model a client runtime, with every default applied.
type Settings struct {
	// Protocol is grpc, http or websocket.
	Protocol string
	// Resolver is how a gRPC client resolves: "grpc" (grpc-go's DNS
	// resolver), "cached" (a JVM-like cache under grpc-go's re-resolution
	// rule), "once", "kubernetes" (a watch on the Service's
	// EndpointSlices through the API) or "xds" (grpc-go's xDS resolver,
	// fed by the lab's xDS control plane; Target.XDS).
	Resolver string
	// PolicySettings are the policy's settings as JSON with grpc-go's
	// names (lbpolicy.Parse); empty for the defaults.
	PolicySettings string
	// CacheTTL (Forever: never expires) and MinResolutionInterval apply to
	// the cached resolver.
	CacheTTL              time.Duration
	MinResolutionInterval time.Duration
	HealthCheck           bool
	WaitForReady          bool
	// Retry is a gRPC retry policy; nil for none.
	Retry *Retry
	// Stream makes each call a server stream lasting StreamLength.
	Stream       bool
	StreamLength time.Duration
	// L7Proxy puts a per-request proxy in front of the target; nil for none.
	L7Proxy *L7Proxy
	// MaxIdleConnsPerHost and MaxConnsPerHost size an HTTP client's pool
	// (net/http's fields; 0 MaxConnsPerHost is no limit).
	MaxIdleConnsPerHost int
	MaxConnsPerHost     int
	// Described lists the settings that differ from the defaults, for
	// reports ("resolver cached", "cache TTL forever", ...).
	Described []string
}

// Retry is gRPC's retryPolicy.
type Retry struct {
	MaxAttempts                int
	InitialBackoff, MaxBackoff time.Duration
	BackoffMultiplier          float64
	RetryableStatusCodes       []codes.Code
}

// L7Proxy is the lab's L7 gRPC proxy in front of a group's target.
type L7Proxy struct {
	// Placement is "sidecar" or "gateway".
	Placement string
	// Policy is one of ProxyPolicies: round_robin, least_request or
	// peak_ewma.
	Policy string
	// Replicas is the number of gateway proxies (1 for sidecars).
	Replicas int
}

// Path is how the group's calls reach the pods: "direct", "L7 sidecar" or
// "L7 gateway".
func (g Group) Path() string {
	if x := g.Settings.L7Proxy; x != nil {
		return "L7 " + x.Placement
	}
	return "direct"
}

// PolicyText describes how the group's calls are balanced, for reports.
func (g Group) PolicyText() string {
	s := g.Settings
	switch {
	case s.L7Proxy != nil:
		return cmp.Or(s.L7Proxy.Policy, "round_robin") + " per call"
	case s.Protocol == ProtocolHTTP:
		return fmt.Sprintf("HTTP/1.1 keep-alive pool (MaxIdleConnsPerHost %d)", s.MaxIdleConnsPerHost)
	case s.Protocol == ProtocolWebSocket:
		return "one WebSocket"
	case g.Target.XDS:
		if !g.Target.XDSAnnotated {
			return "xDS " + g.Policy + " (the control plane's default: the Service has no xds.pinlab.dev annotation)"
		}
		p := "xDS " + g.Policy
		if s.PolicySettings != "" {
			p += " " + s.PolicySettings
		}
		if od := g.Target.OutlierDetection; od != nil {
			p += ", outlier detection: " + od.String()
		}
		return p + " (the Service's annotations)"
	}
	return g.Policy
}
