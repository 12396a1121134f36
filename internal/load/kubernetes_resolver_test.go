package load

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/plan"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubernetesResolver: a round_robin client on the "kubernetes"
// resolver follows the Service's EndpointSlice: a pod added gets calls
// with no connection broken (grpc-go's DNS resolver would never look), and
// with no ready pod calls fail as no-address, not on dead pods.
func TestKubernetesResolver(t *testing.T) {
	api := labtest.NewAPI(t)
	a := startBackend(t, "a", "127.203.60.1:0")
	b := startBackend(t, "b", netip.AddrPortFrom(netip.MustParseAddr("127.203.60.2"), a.addr.Port()).String())
	port, name := int32(a.addr.Port()), "grpc"
	slice := func(ready ...bool) *discovery.EndpointSlice {
		s := &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "pricing-1", Namespace: "shop", Labels: map[string]string{discovery.LabelServiceName: "pricing"}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: &name, Port: &port}},
		}
		for i, r := range ready {
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{[]string{a.ip, b.ip}[i]}, Conditions: discovery.EndpointConditions{Ready: &r}})
		}
		return s
	}
	api.ApplySlice(slice(true))
	var obs collector
	start(t, Config{
		Source: netip.MustParseAddr("127.203.60.9"), Target: "kubernetes://shop/pricing:grpc", Policy: "round_robin",
		Rate: 200, Timeout: 500 * time.Millisecond, Observer: &obs, Resolver: ResolverKubernetes, Kubernetes: api.Client,
	})
	labtest.WaitFor(t, 10*time.Second, "a call answered by a", func() bool { return count(obs.snapshot()).pods["a"] > 0 })

	api.ApplySlice(slice(true, true))
	labtest.WaitFor(t, 10*time.Second, "a call answered by b", func() bool { return count(obs.snapshot()).pods["b"] > 0 })
	if n := obs.connections(); n != 2 {
		t.Errorf("%d connections opened, want 2 (none broken, one added)", n)
	}

	api.ApplySlice(slice(false, false))
	down := time.Now()
	labtest.WaitFor(t, 10*time.Second, "a call failing for want of an address", func() bool {
		c := count(dueAfter(obs.snapshot(), down))
		return c.causes[plan.CauseNoAddress] > 0
	})
}

// TestKubernetesResolverConfig: the mode needs the API and a
// kubernetes:// target.
func TestKubernetesResolverConfig(t *testing.T) {
	base := Config{Source: netip.MustParseAddr("127.203.61.9"), Rate: 1, Resolver: ResolverKubernetes}
	for _, tt := range []struct {
		name string
		cfg  func(Config) Config
		want string
	}{
		{name: "no API", cfg: func(c Config) Config { c.Target = "kubernetes://shop/pricing:grpc"; return c }, want: "needs the Kubernetes API"},
		{name: "dns target", cfg: func(c Config) Config {
			c.Target, c.Kubernetes = "dns:///pricing.shop:8471", labtest.NewAPI(t).Client
			return c
		}, want: "want kubernetes://"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg(base))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
