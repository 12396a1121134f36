package xds

import (
	"cmp"
	"net"
	"slices"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	cswrrv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	pickfirstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/pick_first/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/pinlab/pinlab/internal/lbpolicy"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The Service annotations that set a Service's xDS Cluster
// (lbpolicy.AnnotationPolicy and the others). A bad value is reported as
// a Warning event on the Service and ignored: the Service is served with
// round_robin and no outlier detection.
const (
	AnnotationPolicy           = lbpolicy.AnnotationPolicy
	AnnotationPolicyConfig     = lbpolicy.AnnotationPolicyConfig
	AnnotationOutlierDetection = lbpolicy.AnnotationOutlierDetection
)

// Name is the xDS name of a Service port: "NAME.NAMESPACE:PORT", the
// host and port of an xds:/// target (xds:///pricing.shop:8471). The
// Listener, RouteConfiguration, Cluster and ClusterLoadAssignment of
// that port all have this name.
func Name(namespace, service string, port int32) string {
	return net.JoinHostPort(service+"."+namespace, strconv.Itoa(int(port)))
}

// settings is what a Service's annotations ask for.
type settings struct {
	policy  lbpolicy.Policy
	outlier *lbpolicy.OutlierDetection
}

// settingsOf reads svc's annotations (lbpolicy.FromAnnotations); on an
// error, it returns the defaults and the error.
func settingsOf(svc *corev1.Service) (settings, error) {
	p, od, err := lbpolicy.FromAnnotations(svc.Annotations)
	return settings{policy: p, outlier: od}, err
}

// problem is a Service whose annotations were ignored.
type problem struct {
	svc *corev1.Service
	err error
}

// build makes the four resource types for every port of every Service
// that has a selector-managed or mirrored EndpointSlice set (ExternalName
// Services have none). slices are all the EndpointSlices of the same
// namespaces; those of one Service are merged, one endpoint per address
// (the readiest, when slices overlap during a change).
func build(services []*corev1.Service, eps []*discoveryv1.EndpointSlice) (map[resource.Type][]types.Resource, []problem) {
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		if n := s.Labels[discoveryv1.LabelServiceName]; n != "" {
			k := s.Namespace + "/" + n
			bySvc[k] = append(bySvc[k], s)
		}
	}
	out := map[resource.Type][]types.Resource{}
	var problems []problem
	slices.SortFunc(services, func(a, b *corev1.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, svc := range services {
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		set, err := settingsOf(svc)
		if err != nil {
			problems = append(problems, problem{svc, err})
		}
		for _, sp := range svc.Spec.Ports {
			if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			name := Name(svc.Namespace, svc.Name, sp.Port)
			out[resource.ListenerType] = append(out[resource.ListenerType], listener(name))
			out[resource.RouteType] = append(out[resource.RouteType], route(name, set.policy))
			out[resource.ClusterType] = append(out[resource.ClusterType], cluster(name, set))
			out[resource.EndpointType] = append(out[resource.EndpointType], assignment(name, sp.Name, bySvc[svc.Namespace+"/"+svc.Name]))
		}
	}
	return out, problems
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil { // only for unregistered types, which these are not
		panic(err)
	}
	return a
}

var ads = &corev3.ConfigSource{
	ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	ResourceApiVersion:    corev3.ApiVersion_V3,
}

// listener is the API listener gRPC clients look up by their target's
// name: an HTTP connection manager whose routes come by RDS, with the
// router filter grpc-go requires last.
func listener(name string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: name}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}
}

// route sends every call to the cluster of the same name; for ring_hash
// with a requestHashHeader it hashes that header (gRFC A42's hash
// policy), without one grpc-go hashes each call at random.
func route(name string, p lbpolicy.Policy) *routev3.RouteConfiguration {
	action := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name}}
	if p.Ring != nil && p.Ring.RequestHashHeader != "" {
		action.HashPolicy = []*routev3.RouteAction_HashPolicy{{
			PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: p.Ring.RequestHashHeader}},
		}}
	}
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name: name, Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ""}},
			Action: &routev3.Route_Route{Route: action},
		}},
	}}}
}

// cluster is an EDS cluster with the Service's policy: the endpoint
// picking policy under wrr_locality (localities weighted, as grpc-go
// does for ROUND_ROBIN), or ring_hash, which spans localities itself.
func cluster(name string, s settings) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: name},
		LoadBalancingPolicy:  lbPolicy(s.policy),
	}
	if od := s.outlier; od != nil {
		c.OutlierDetection = outlier(*od)
	}
	return c
}

func policyOf(m proto.Message) *clusterv3.LoadBalancingPolicy {
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{
		TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: string(m.ProtoReflect().Descriptor().FullName()), TypedConfig: mustAny(m)},
	}}}
}

func lbPolicy(p lbpolicy.Policy) *clusterv3.LoadBalancingPolicy {
	var child proto.Message
	switch p.Name {
	case lbpolicy.RingHash:
		rh := &ringhashv3.RingHash{HashFunction: ringhashv3.RingHash_XX_HASH}
		if r := p.Ring; r != nil {
			rh.MinimumRingSize = u64(r.MinRingSize)
			rh.MaximumRingSize = u64(r.MaxRingSize)
		}
		return policyOf(rh)
	case lbpolicy.PickFirst:
		child = &pickfirstv3.PickFirst{}
	case lbpolicy.LeastRequest:
		lr := &leastrequestv3.LeastRequest{}
		if p.LeastRequest != nil && p.LeastRequest.ChoiceCount != 0 {
			lr.ChoiceCount = wrapperspb.UInt32(p.LeastRequest.ChoiceCount)
		}
		child = lr
	case lbpolicy.WeightedRoundRobin:
		w := &cswrrv3.ClientSideWeightedRoundRobin{}
		if c := p.WRR; c != nil {
			if c.EnableOOBLoadReport {
				w.EnableOobLoadReport = wrapperspb.Bool(true)
			}
			w.OobReportingPeriod = dur(c.OOBReportingPeriod)
			w.BlackoutPeriod = dur(c.BlackoutPeriod)
			w.WeightExpirationPeriod = dur(c.WeightExpirationPeriod)
			w.WeightUpdatePeriod = dur(c.WeightUpdatePeriod)
			if c.ErrorUtilizationPenalty != nil {
				w.ErrorUtilizationPenalty = wrapperspb.Float(float32(*c.ErrorUtilizationPenalty))
			}
		}
		child = w
	default:
		child = &roundrobinv3.RoundRobin{}
	}
	return policyOf(&wrrlocalityv3.WrrLocality{EndpointPickingPolicy: policyOf(child)})
}

func outlier(od lbpolicy.OutlierDetection) *clusterv3.OutlierDetection {
	o := &clusterv3.OutlierDetection{
		Interval:           dur(od.Interval),
		BaseEjectionTime:   dur(od.BaseEjectionTime),
		MaxEjectionTime:    dur(od.MaxEjectionTime),
		MaxEjectionPercent: u32(od.MaxEjectionPercent),
		// Off unless given (A50: enforcing_success_rate 100 by default,
		// enforcing_failure_percentage 0).
		EnforcingSuccessRate: wrapperspb.UInt32(0),
	}
	if sr := od.SuccessRate; sr != nil {
		o.EnforcingSuccessRate = cmp.Or(u32(sr.EnforcementPercentage), wrapperspb.UInt32(100))
		o.SuccessRateStdevFactor = u32(sr.StdevFactor)
		o.SuccessRateMinimumHosts = u32(sr.MinimumHosts)
		o.SuccessRateRequestVolume = u32(sr.RequestVolume)
	}
	if fp := od.FailurePercentage; fp != nil {
		o.EnforcingFailurePercentage = cmp.Or(u32(fp.EnforcementPercentage), wrapperspb.UInt32(100))
		o.FailurePercentageThreshold = u32(fp.Threshold)
		o.FailurePercentageMinimumHosts = u32(fp.MinimumHosts)
		o.FailurePercentageRequestVolume = u32(fp.RequestVolume)
	}
	return o
}

func dur(d lbpolicy.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d.D())
}

func u32(v *uint32) *wrapperspb.UInt32Value {
	if v == nil {
		return nil
	}
	return wrapperspb.UInt32(*v)
}

func u64(v uint64) *wrapperspb.UInt64Value {
	if v == 0 {
		return nil
	}
	return wrapperspb.UInt64(v)
}

// endpoint is one address of a Service port, with its conditions.
type endpoint struct {
	addr, zone string
	port       uint32
	health     corev3.HealthStatus
}

// healthOf maps an EndpointSlice endpoint's conditions to xDS (KEP-1672):
// ready is HEALTHY; serving while terminating is DRAINING, which grpc-go
// sends no new calls to; anything else is UNHEALTHY. Ready and serving
// are true when unset, terminating false.
func healthOf(c discoveryv1.EndpointConditions) corev3.HealthStatus {
	ready := c.Ready == nil || *c.Ready
	serving := c.Serving == nil && ready || c.Serving != nil && *c.Serving
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case ready:
		return corev3.HealthStatus_HEALTHY
	case serving && terminating:
		return corev3.HealthStatus_DRAINING
	}
	return corev3.HealthStatus_UNHEALTHY
}

// rank orders health statuses, readiest first.
func rank(h corev3.HealthStatus) int {
	switch h {
	case corev3.HealthStatus_HEALTHY:
		return 0
	case corev3.HealthStatus_DRAINING:
		return 1
	}
	return 2
}

// assignment lists the endpoints of the Service port named portName in
// the Service's slices, by zone (one locality per zone, weighted by its
// healthy endpoints, at least 1: grpc-go drops localities of weight 0).
func assignment(name, portName string, eps []*discoveryv1.EndpointSlice) *endpointv3.ClusterLoadAssignment {
	byAddr := map[string]endpoint{}
	for _, s := range eps {
		var port *int32
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				port = p.Port
			}
		}
		if port == nil {
			continue
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				ep := endpoint{addr: a, port: uint32(*port), health: healthOf(e.Conditions)}
				if e.Zone != nil {
					ep.zone = *e.Zone
				}
				key := net.JoinHostPort(a, strconv.Itoa(int(*port)))
				if old, ok := byAddr[key]; !ok || rank(ep.health) < rank(old.health) {
					byAddr[key] = ep
				}
			}
		}
	}
	byZone := map[string][]endpoint{}
	for _, ep := range byAddr {
		byZone[ep.zone] = append(byZone[ep.zone], ep)
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	for _, zone := range slices.Sorted(mapsKeys(byZone)) {
		list := byZone[zone]
		slices.SortFunc(list, func(a, b endpoint) int { return cmp.Or(cmp.Compare(a.addr, b.addr), cmp.Compare(a.port, b.port)) })
		var weight uint32
		loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Zone: zone}}
		for _, ep := range list {
			if ep.health == corev3.HealthStatus_HEALTHY {
				weight++
			}
			loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
				HealthStatus: ep.health,
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{
					Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address: ep.addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: ep.port},
					}},
				}}},
			})
		}
		loc.LoadBalancingWeight = wrapperspb.UInt32(max(weight, 1))
		cla.Endpoints = append(cla.Endpoints, loc)
	}
	return cla
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
