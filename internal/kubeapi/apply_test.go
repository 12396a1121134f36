package kubeapi

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func nsObj(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func svc(ns, name string, labels map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{Ports: ports}}
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "pinlab"}}}}}}
}

func statefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	d := deployment(ns, name, replicas)
	return &appsv1.StatefulSet{ObjectMeta: d.ObjectMeta,
		Spec: appsv1.StatefulSetSpec{Replicas: d.Spec.Replicas, Selector: d.Spec.Selector, Template: d.Spec.Template}}
}

func slice(ns, name, service, addr string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("grpc"), Port: new(int32(8471))}},
	}
}

var grpcPort = corev1.ServicePort{Name: "grpc", Port: 8471}

// TestApply: Apply takes what kubectl apply takes against a real API
// server, in any order (issue 15): a Namespace after the objects in it,
// an EndpointSlice before its Service or with none; an object that exists
// (the kube-system Namespace, the kube-dns Service the embedded API
// creates) is merged with the given one; and Apply returns once the
// informer caches hold every object.
func TestApply(t *testing.T) {
	tests := []struct {
		name  string
		objs  []runtime.Object
		check func(t *testing.T, ctx context.Context, c *cluster.Cluster)
		// wantErr checks Apply's error; nil: it must succeed.
		wantErr func(error) bool
	}{
		{name: "objects before their Namespace, slices before or without their Service",
			objs: []runtime.Object{
				deployment("shop", "pricing", 2),
				statefulSet("shop", "db", 1),
				slice("shop", "legacy-1", "legacy", "127.0.0.77"),  // before its Service
				slice("shop", "orphan-1", "nothing", "127.0.0.78"), // no Service at all
				svc("shop", "legacy", nil, grpcPort),
				nsObj("shop", nil),
			},
			check: func(t *testing.T, ctx context.Context, c *cluster.Cluster) {
				for _, name := range []string{"legacy-1", "orphan-1"} {
					if _, err := c.Client().DiscoveryV1().EndpointSlices("shop").Get(ctx, name, metav1.GetOptions{}); err != nil {
						t.Errorf("EndpointSlice %s: %v", name, err)
					}
				}
				if _, err := c.Client().AppsV1().Deployments("shop").Get(ctx, "pricing", metav1.GetOptions{}); err != nil {
					t.Errorf("Deployment: %v", err)
				}
			}},
		{name: "no namespace is default",
			objs: []runtime.Object{svc("", "web", nil, grpcPort)},
			check: func(t *testing.T, ctx context.Context, c *cluster.Cluster) {
				if _, err := c.Client().CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
					t.Errorf("Service default/web: %v", err)
				}
			}},
		{name: "an existing Namespace is merged",
			objs: []runtime.Object{nsObj("kube-system", map[string]string{"team": "platform"})},
			check: func(t *testing.T, ctx context.Context, c *cluster.Cluster) {
				ks, err := c.Client().CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
				if err != nil || ks.Labels["team"] != "platform" {
					t.Errorf("kube-system = %v, %v; want it with the file's label", ks.Labels, err)
				}
			}},
		{name: "an existing Service is merged: ports added, labels kept, ClusterIP kept",
			objs: []runtime.Object{svc("kube-system", "kube-dns", map[string]string{"team": "platform"},
				corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
				corev1.ServicePort{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP})},
			check: func(t *testing.T, ctx context.Context, c *cluster.Cluster) {
				dns, err := c.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var ports []string
				for _, p := range dns.Spec.Ports {
					ports = append(ports, p.Name)
				}
				if diff := cmp.Diff([]string{"dns", "dns-tcp", "metrics"}, ports); diff != "" {
					t.Errorf("kube-dns ports (-want +got):\n%s", diff)
				}
				if dns.Labels["team"] != "platform" || dns.Labels["k8s-app"] != "kube-dns" || dns.Spec.ClusterIP != c.DNSIP().String() {
					t.Errorf("kube-dns after the merge: labels %v, ClusterIP %s; want both labels, the ClusterIP it had", dns.Labels, dns.Spec.ClusterIP)
				}
			}},
		{name: "a kind it does not apply", objs: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}},
			wantErr: func(err error) bool { return err != nil && err.Error() == "kubeapi: cannot apply *v1.ConfigMap" }},
		{name: "the API's error, as it is", objs: []runtime.Object{deployment("nowhere", "web", 1)},
			wantErr: apierrors.IsNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, c := embedded(t)
			ctx := labtest.Context(t, 10*time.Second)
			err := k.Apply(ctx, tt.objs)
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("Apply: %v; want another error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			for _, o := range tt.objs {
				if k.store(o) == nil {
					t.Fatalf("test bug: no store for %T", o)
				}
			}
			if err := k.waitCached(labtest.Context(t, 0), tt.objs); err != nil {
				t.Errorf("the caches lack an object Apply applied: %v", err)
			}
			tt.check(t, ctx, c)
		})
	}
}

// TestThreeWayPatch: the patch Apply sends for an object that exists is
// what the given one changes after the API server's defaults, and removes
// nothing.
func TestThreeWayPatch(t *testing.T) {
	// stored is o as the API server stores it: defaulted, with a ClusterIP
	// for a Service and the metadata it owns.
	stored := func(o runtime.Object) runtime.Object {
		o = o.DeepCopyObject()
		cluster.Default(o)
		if s, ok := o.(*corev1.Service); ok {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "127.96.0.20", []string{"127.96.0.20"}
		}
		m := o.(metav1.Object)
		m.SetUID("8d1f")
		m.SetResourceVersion("7")
		m.SetGeneration(1)
		return o
	}
	tests := []struct {
		name              string
		modified, current runtime.Object
		want              string
	}{
		{name: "what the API server filled in is no change",
			modified: svc("shop", "web", nil, grpcPort), current: stored(svc("shop", "web", nil, grpcPort)), want: `{}`},
		{name: "a Deployment as stored is no change",
			modified: deployment("shop", "web", 2), current: stored(deployment("shop", "web", 2)), want: `{}`},
		{name: "a label added, none removed",
			modified: svc("shop", "web", map[string]string{"team": "platform"}, grpcPort),
			current:  stored(svc("shop", "web", map[string]string{"k8s-app": "web"}, grpcPort)),
			want:     `{"metadata":{"labels":{"team":"platform"}}}`},
		{name: "a port added",
			modified: svc("shop", "web", nil, grpcPort, corev1.ServicePort{Name: "metrics", Port: 9153}),
			current:  stored(svc("shop", "web", nil, grpcPort)),
			want:     `{"spec":{"$setElementOrder/ports":[{"port":8471},{"port":9153}],"ports":[{"name":"metrics","port":9153,"protocol":"TCP","targetPort":9153}]}}`},
		{name: "replicas changed",
			modified: deployment("shop", "web", 3), current: stored(deployment("shop", "web", 2)),
			want: `{"spec":{"replicas":3}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := threeWayPatch(tt.modified, tt.current)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}
}
