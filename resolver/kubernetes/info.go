package kubernetes

import (
	"slices"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/resolver"
)

// EndpointInfo is what an EndpointSlice says about one published endpoint.
// The resolver attaches it to every resolver.Endpoint (Attributes, for load
// balancing policies) and to every resolver.Address (Attributes); read it
// with InfoFromEndpoint or InfoFromAddress. grpc-go keys its subchannels on
// the address string alone, so a change here (a new hint) updates the
// attributes without a reconnect.
type EndpointInfo struct {
	// Zone is the endpoint's zone (topology.kubernetes.io/zone of its
	// node); "" when the slice does not say.
	Zone string
	// NodeName is the node the endpoint runs on; "" when unset.
	NodeName string
	// Hostname is the endpoint's hostname (StatefulSet pods behind a
	// headless Service); "" when unset.
	Hostname string
	// ForZones and ForNodes are the endpoint's topology hints (topology
	// aware routing), as the EndpointSlice controller set them; nil when
	// there are none.
	ForZones, ForNodes []string
	// Serving and Terminating are the endpoint's conditions, with nil read
	// as true and false, as discovery/v1 says. A published endpoint is
	// Ready; with WithTerminatingFallback it may instead be serving and
	// terminating (both true).
	Serving, Terminating bool
}

// Equal reports whether o is an EndpointInfo equal to i; grpc-go's
// attributes compare values with it.
func (i EndpointInfo) Equal(o any) bool {
	oi, ok := o.(EndpointInfo)
	return ok && i.Zone == oi.Zone && i.NodeName == oi.NodeName && i.Hostname == oi.Hostname &&
		slices.Equal(i.ForZones, oi.ForZones) && slices.Equal(i.ForNodes, oi.ForNodes) &&
		i.Serving == oi.Serving && i.Terminating == oi.Terminating
}

// infoKey is the attributes key of an EndpointInfo.
type infoKey struct{}

func (i EndpointInfo) attributes() *attributes.Attributes {
	return attributes.New(infoKey{}, i)
}

// InfoFromEndpoint returns the EndpointInfo the resolver attached to e;
// false if it has none (e did not come from this resolver).
func InfoFromEndpoint(e resolver.Endpoint) (EndpointInfo, bool) {
	return infoFrom(e.Attributes)
}

// InfoFromAddress returns the EndpointInfo the resolver attached to a;
// false if it has none.
func InfoFromAddress(a resolver.Address) (EndpointInfo, bool) {
	return infoFrom(a.Attributes)
}

func infoFrom(a *attributes.Attributes) (EndpointInfo, bool) {
	i, ok := a.Value(infoKey{}).(EndpointInfo)
	return i, ok
}
