package evidence_test

import (
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/evidence"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// podOn is a ready pod of app=pricing whose container names port grpc
// at number.
func podOn(name, ip string, number int32) corev1.Pod {
	p := readyPod(name, ip)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "grpc", ContainerPort: number}, {Name: "metrics", ContainerPort: 9090}}
	return p
}

// slice is an EndpointSlice of Service pricing listing pods at port
// grpc=number.
func slice(name string, number int32, pods ...corev1.Pod) discoveryv1.EndpointSlice {
	sl := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "pricing"}},
		Ports:      []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To(number)}, {Name: ptr.To("metrics"), Port: ptr.To(int32(9090))}},
	}
	for _, p := range pods {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: p.Name}})
	}
	return sl
}

// TestFromObjectsPorts: a named targetPort that two Deployments number
// differently is read at each pod's own port (its EndpointSlice's, as
// the EndpointSlice controller splits them), the Service port is chosen
// by --port, by appProtocol or name, and an unknown --port or a
// namespace without Services is a clear error.
func TestFromObjectsPorts(t *testing.T) {
	a0, a1, b0 := podOn("a-0", "127.203.211.1", 8471), podOn("a-1", "127.203.211.2", 8471), podOn("b-0", "127.203.211.3", 9471)
	objs := objects(a0, a1, b0)
	objs.Services[0].Spec.Ports = []corev1.ServicePort{
		{Name: "metrics", Port: 9090, TargetPort: intstr.FromString("metrics")},
		{Name: "rpc", Port: 80, TargetPort: intstr.FromString("grpc"), AppProtocol: ptr.To("grpc")},
	}
	objs.EndpointSlices = []discoveryv1.EndpointSlice{slice("pricing-a", 8471, a0, a1), slice("pricing-b", 9471, b0)}
	noSlices := objs
	noSlices.EndpointSlices = nil

	tests := []struct {
		name  string
		objs  evidence.Objects
		ns    string
		port  string
		addrs []string // by pod name order: a-0, a-1, b-0
		err   string
	}{
		{name: "each pod at its slice's port", objs: objs, ns: "shop", addrs: []string{"127.203.211.1:8471", "127.203.211.2:8471", "127.203.211.3:9471"}},
		{name: "without slices, each pod's own named port", objs: noSlices, ns: "shop", addrs: []string{"127.203.211.1:8471", "127.203.211.2:8471", "127.203.211.3:9471"}},
		{name: "--port by name", objs: objs, ns: "shop", port: "metrics", addrs: []string{"127.203.211.1:9090", "127.203.211.2:9090", "127.203.211.3:9090"}},
		{name: "--port by number", objs: objs, ns: "shop", port: "80", addrs: []string{"127.203.211.1:8471", "127.203.211.2:8471", "127.203.211.3:9471"}},
		{name: "unknown --port", objs: objs, ns: "shop", port: "grpc", err: `Service shop/pricing has no port "grpc" (its ports: metrics:9090, rpc:80)`},
		{name: "namespace without Services", objs: objs, ns: "shoop", err: `namespace "shoop" has no Services at all`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := evidence.FromObjects(tt.objs, tt.ns, "pricing", tt.port)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v; want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ev.Pods {
				got = append(got, p.Addr)
			}
			if strings.Join(got, " ") != strings.Join(tt.addrs, " ") {
				t.Errorf("addresses %v; want %v", got, tt.addrs)
			}
		})
	}
}
