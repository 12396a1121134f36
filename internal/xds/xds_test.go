package xds

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds" // the xds:/// resolver and the xDS balancers
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// fleet is a control plane over a fake API server, pods on loopback and
// the Service "pricing" in "shop" selecting them.
type fleet struct {
	t    testing.TB
	cs   *fake.Clientset
	srv  *Server
	pods map[string]netip.AddrPort // by name
}

// newFleet starts n pods "pricing-0".. on 127.77.0.1.. (one port), the
// control plane, and the Service with annotations, no slices yet.
func newFleet(t testing.TB, n int, annotations map[string]string) *fleet {
	t.Helper()
	f := &fleet{t: t, cs: fake.NewClientset(), pods: map[string]netip.AddrPort{}}
	var port uint16
	for i := range n {
		name := fmt.Sprintf("pricing-%d", i)
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 77, 0, byte(i + 1)}), port)
		s := podtest.Start(t, pod.Config{Name: name, Namespace: "shop", Addr: addr})
		got := netip.MustParseAddrPort(s.Addr().String())
		port = got.Port()
		f.pods[name] = got
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop", Annotations: annotations},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471}}}}
	if _, err := f.cs.CoreV1().Services("shop").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.srv, err = Start(t.Context(), Config{Clientset: f.cs, Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.srv.Close() })
	return f
}

// ep is one endpoint of a slice: a pod and its conditions.
type ep struct {
	pod                         string
	ready, serving, terminating bool
	zone                        string
}

func readyEP(pod string) ep { return ep{pod: pod, ready: true, serving: true} }

// slice creates or replaces EndpointSlice name with eps, port "grpc".
func (f *fleet) slice(name string, eps ...ep) {
	f.t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "pricing"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, e := range eps {
		a := f.pods[e.pod]
		port := int32(a.Port())
		s.Ports = []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: &port}}
		d := discoveryv1.Endpoint{Addresses: []string{a.Addr().String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(e.ready), Serving: ptr(e.serving), Terminating: ptr(e.terminating)}}
		if e.zone != "" {
			d.Zone = ptr(e.zone)
		}
		s.Endpoints = append(s.Endpoints, d)
	}
	slices := f.cs.DiscoveryV1().EndpointSlices("shop")
	if _, err := slices.Update(f.t.Context(), s, metav1.UpdateOptions{}); err != nil {
		if _, err := slices.Create(f.t.Context(), s, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// dial opens a channel to xds:///target through this control plane, with
// grpc-go's own xDS resolver and client.
func (f *fleet) dial(target string) pricingv1.PricingClient {
	f.t.Helper()
	boot, err := Bootstrap(f.srv.Addr().String(), "test-client")
	if err != nil {
		f.t.Fatal(err)
	}
	r, err := grpcxds.NewXDSResolverWithConfigForTesting(boot)
	if err != nil {
		f.t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return pricingv1.NewPricingClient(conn)
}

// calls makes n calls and counts them by the pod that answered.
func calls(t testing.TB, c pricingv1.PricingClient, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		r, err := c.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "x"}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		got[r.GetPod()]++
	}
	return got
}

// eventually calls until ok holds for the counts of a batch of 20 calls,
// at most 10 s.
func eventually(t testing.TB, c pricingv1.PricingClient, what string, ok func(map[string]int) bool) {
	t.Helper()
	var last map[string]int
	err := wait.PollUntilContextTimeout(t.Context(), 0, 10*time.Second, true, func(context.Context) (bool, error) {
		last = calls(t, c, 20)
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("%s: not within 10 s; the last 20 calls went to %v", what, last)
	}
}

// TestEndpointSlices: calls through grpc-go's xDS client follow the
// EndpointSlices: every slice merged, a pod added, a terminating pod that
// still serves drained, a not-ready pod skipped, a slice removed.
func TestEndpointSlices(t *testing.T) {
	f := newFleet(t, 4, nil)
	f.slice("pricing-a", readyEP("pricing-0"))
	f.slice("pricing-b", readyEP("pricing-1"), readyEP("pricing-2"))
	c := f.dial("pricing.shop:8471")
	all3 := func(m map[string]int) bool { return m["pricing-0"] > 0 && m["pricing-1"] > 0 && m["pricing-2"] > 0 }
	eventually(t, c, "two slices, three pods, round_robin", all3)
	if got := calls(t, c, 30); got["pricing-0"] != 10 || got["pricing-1"] != 10 || got["pricing-2"] != 10 {
		t.Errorf("30 calls under round_robin went %v, want 10 each", got)
	}
	f.slice("pricing-b", readyEP("pricing-1"), readyEP("pricing-2"), readyEP("pricing-3"))
	eventually(t, c, "a pod added", func(m map[string]int) bool { return m["pricing-3"] > 0 })
	f.slice("pricing-b", readyEP("pricing-1"), ep{pod: "pricing-2", serving: true, terminating: true}, ep{pod: "pricing-3"})
	eventually(t, c, "a terminating pod drained, a not-ready one skipped", func(m map[string]int) bool {
		return m["pricing-2"] == 0 && m["pricing-3"] == 0 && m["pricing-0"] > 0 && m["pricing-1"] > 0
	})
	if err := f.cs.DiscoveryV1().EndpointSlices("shop").Delete(t.Context(), "pricing-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, c, "a slice removed", func(m map[string]int) bool { return m["pricing-0"] == 0 && m["pricing-1"] == 20 })
}

// TestDuplicateAcrossSlices: an address in two slices (as during a
// change) is one endpoint, the readier; grpc-go rejects duplicates.
func TestDuplicateAcrossSlices(t *testing.T) {
	f := newFleet(t, 2, nil)
	f.slice("pricing-a", readyEP("pricing-0"), ep{pod: "pricing-1"})
	f.slice("pricing-b", readyEP("pricing-1"))
	c := f.dial("pricing.shop:8471")
	eventually(t, c, "both pods, pricing-1 ready in one slice", func(m map[string]int) bool { return m["pricing-0"] == 10 && m["pricing-1"] == 10 })
}

// TestUnknownName: a target no Service has gets an answer without it,
// at once: on a raw ADS stream the Listener request is answered with no
// resources (grpc-go ignores such an answer for a name it never had, so
// only a raw stream tells it from no answer). Through grpc-go the call
// fails UNAVAILABLE, not at the call's deadline, and the calls after it
// name the resource. grpc-go takes a name it never had as missing only
// after its 15 s watch timer, so this test lasts 15 s. The first call may
// instead read "produced zero addresses": grpc-go's resolver sends the
// channel an empty update (which picks pick_first) before the error
// naming the resource (xdsResolver.sendNewServiceConfig, v1.85.0), and a
// call waiting for the first resolver update is released by the first.
func TestUnknownName(t *testing.T) {
	f := newFleet(t, 1, nil)
	f.slice("pricing-a", readyEP("pricing-0"))
	for _, tt := range []struct {
		name string
		want []string
	}{{"pricing.shop:8471", []string{"pricing.shop:8471"}}, {"nothing.shop:8471", []string{}}} {
		if got, err := listenersAnswered(t, f.srv.Addr().String(), tt.name); err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("raw ADS request for the Listener %s: answered %q, %v; want %q within 5 s", tt.name, got, err, tt.want)
		}
	}
	c := f.dial("nothing.shop:8471")
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	_, err := c.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "x"})
	if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
		t.Fatalf("call to an unknown name: %v; want UNAVAILABLE before the 25 s deadline", err)
	}
	var last error
	perr := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "x"})
		if status.Code(err) != codes.DeadlineExceeded {
			last = err
		}
		return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "nothing.shop:8471"), nil
	})
	if perr != nil {
		t.Errorf("calls to an unknown name: last %v; want UNAVAILABLE naming nothing.shop:8471 within 5 s of the first failure", last)
	}
}

// listenersAnswered sends one Listener request for name on a raw ADS
// stream to addr and returns the names of the Listeners in the first
// answer; it errs when none comes within 5 s.
func listenersAnswered(t testing.TB, addr, name string) ([]string, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "raw-test"}, TypeUrl: resourcev3.ListenerType, ResourceNames: []string{name}}
	if err := stream.Send(req); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if resp.GetTypeUrl() != resourcev3.ListenerType {
		return nil, fmt.Errorf("answer of type %s", resp.GetTypeUrl())
	}
	names := []string{}
	for _, r := range resp.GetResources() {
		var l listenerv3.Listener
		if err := r.UnmarshalTo(&l); err != nil {
			return nil, err
		}
		names = append(names, l.GetName())
	}
	return names, nil
}

// TestPolicies: every policy and outlier detection, as annotations, gives
// a Cluster grpc-go accepts and serves; a bad annotation is a Warning
// event on the Service and the Service is still served.
func TestPolicies(t *testing.T) {
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		wantEvent   string
	}{
		{"default", nil, ""},
		{"pick_first", map[string]string{AnnotationPolicy: "pick_first"}, ""},
		{"least_request", map[string]string{AnnotationPolicy: "least_request", AnnotationPolicyConfig: `{"choiceCount": 3}`}, ""},
		{"weighted_round_robin", map[string]string{AnnotationPolicy: "weighted_round_robin", AnnotationPolicyConfig: `{"blackoutPeriod": "1s", "enableOobLoadReport": true}`}, ""},
		{"ring_hash", map[string]string{AnnotationPolicy: "ring_hash", AnnotationPolicyConfig: `{"minRingSize": 64, "maxRingSize": 256}`}, ""},
		{"outlier detection", map[string]string{AnnotationOutlierDetection: `{"interval": "1s", "failurePercentageEjection": {"threshold": 50, "minimumHosts": 2, "requestVolume": 10}}`}, ""},
		{"unknown policy", map[string]string{AnnotationPolicy: "fastest"}, `unknown policy "fastest"`},
		{"bad outlier detection", map[string]string{AnnotationOutlierDetection: `{"maxEjectionPercent": 300}`}, "maxEjectionPercent 300 above 100"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 2, tt.annotations)
			f.slice("pricing-a", readyEP("pricing-0"), readyEP("pricing-1"))
			c := f.dial("pricing.shop:8471")
			calls(t, c, 10)
			if tt.wantEvent == "" {
				return
			}
			err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				evs, err := f.cs.CoreV1().Events("shop").List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				for _, e := range evs.Items {
					if e.InvolvedObject.Name == "pricing" && e.Reason == ReasonBadAnnotation && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, tt.wantEvent) {
						return true, nil
					}
				}
				return false, nil
			})
			if err != nil {
				t.Errorf("no Warning event %s with %q on the Service: %v", ReasonBadAnnotation, tt.wantEvent, err)
			}
		})
	}
}
