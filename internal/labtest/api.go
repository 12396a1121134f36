package labtest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// apiTimeout bounds each call an API makes to its fake clientset.
const apiTimeout = 10 * time.Second

// API is a fake API server (client-go's fake clientset, which stores what
// it is given and serves watches, with none of the API server's
// defaulting) and a shared informer factory over it, as the lab's
// components get them.
type API struct {
	Client  *fake.Clientset
	Factory informers.SharedInformerFactory

	t    testing.TB
	stop chan struct{}
}

// NewAPI returns an API holding objs. Its informers start only when Start
// is called, so that components can ask the factory for theirs first (as
// their New does); they stop when the test ends. Create the API before the
// components on it: cleanups run last-registered first, so the components
// then stop before their informers.
func NewAPI(t testing.TB, objs ...runtime.Object) *API {
	a := &API{Client: fake.NewClientset(objs...), t: t, stop: make(chan struct{})}
	a.Factory = informers.NewSharedInformerFactory(a.Client, 0)
	t.Cleanup(func() {
		close(a.stop)
		a.Factory.Shutdown()
	})
	return a
}

// Start starts every informer asked of the factory so far and waits until
// their caches have synced, failing the test if one does not.
func (a *API) Start() {
	a.t.Helper()
	a.Factory.Start(a.stop)
	for typ, ok := range a.Factory.WaitForCacheSync(a.stop) {
		if !ok {
			a.t.Fatalf("informer for %v did not sync", typ)
		}
	}
}

// ApplyService creates svc or, if it exists, replaces it.
func (a *API) ApplyService(svc *v1.Service) {
	a.t.Helper()
	apply(a, "Service", a.Client.CoreV1().Services(svc.Namespace), svc)
}

// DeleteService deletes Service ns/name.
func (a *API) DeleteService(ns, name string) {
	a.t.Helper()
	if err := a.Client.CoreV1().Services(ns).Delete(Context(a.t, apiTimeout), name, metav1.DeleteOptions{}); err != nil {
		a.t.Fatalf("delete Service %s/%s: %v", ns, name, err)
	}
}

// ApplySlice creates s or, if it exists, replaces it.
func (a *API) ApplySlice(s *discovery.EndpointSlice) {
	a.t.Helper()
	apply(a, "EndpointSlice", a.Client.DiscoveryV1().EndpointSlices(s.Namespace), s)
}

// writer is the part of a typed client that apply uses.
type writer[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}

// apply creates obj of kind through w or, if it exists, replaces it.
func apply[T metav1.Object](a *API, kind string, w writer[T], obj T) {
	a.t.Helper()
	ctx := Context(a.t, apiTimeout)
	_, err := w.Update(ctx, obj, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = w.Create(ctx, obj, metav1.CreateOptions{})
	}
	if err != nil {
		a.t.Fatalf("apply %s %s/%s: %v", kind, obj.GetNamespace(), obj.GetName(), err)
	}
}

// Service is a ClusterIP Service ns/name on clusterIP ("None" makes it
// headless) with ports and no selector.
func Service(ns, name, clusterIP string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Ports: ports},
	}
}

// ServicePort is a TCP port of a Service.
func ServicePort(name string, port int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Port: port, Protocol: v1.ProtocolTCP}
}

// Slice is an IPv4 EndpointSlice ns/name of Service svc (by its
// kubernetes.io/service-name label) with ports and endpoints eps.
func Slice(ns, name, svc string, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{discovery.LabelServiceName: svc},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

// SlicePort is a TCP port of an EndpointSlice.
func SlicePort(name string, port uint16) discovery.EndpointPort {
	return discovery.EndpointPort{Name: new(name), Port: new(int32(port)), Protocol: new(v1.ProtocolTCP)}
}

// Endpoint is Pod ns/pod at ip in an EndpointSlice, with conditions c.
func Endpoint(ns, pod string, ip netip.Addr, c discovery.EndpointConditions) discovery.Endpoint {
	return discovery.Endpoint{
		Addresses:  []string{ip.String()},
		Conditions: c,
		TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod},
	}
}

// Endpoint conditions as the EndpointSlice controller writes them for a
// pod that is Ready, not Ready, terminating but still Ready by its probe
// (serving, so proxies may fall back to it), and terminating and not
// serving.
var (
	Ready              = discovery.EndpointConditions{Ready: new(true), Serving: new(true), Terminating: new(false)}
	NotReady           = discovery.EndpointConditions{Ready: new(false), Serving: new(false), Terminating: new(false)}
	ServingTerminating = discovery.EndpointConditions{Ready: new(false), Serving: new(true), Terminating: new(true)}
	Terminating        = discovery.EndpointConditions{Ready: new(false), Serving: new(false), Terminating: new(true)}
)
