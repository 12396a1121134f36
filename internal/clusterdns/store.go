package clusterdns

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Names of the lookup indexes added to the informers. Their functions
// depend only on the object, so Servers sharing a factory share them.
const (
	// serviceNameIndex: EndpointSlices by "<namespace>/<service>", from the
	// kubernetes.io/service-name label.
	serviceNameIndex = "clusterdns.pinlab/service-name"
	// sliceAddrIndex: EndpointSlices by each ready address (netip form).
	sliceAddrIndex = "clusterdns.pinlab/ready-address"
	// clusterIPIndex: Services by each ClusterIP (netip form).
	clusterIPIndex = "clusterdns.pinlab/cluster-ip"
	// podIPIndex: Pods that are not finished by each IP (netip form).
	podIPIndex = "clusterdns.pinlab/pod-ip"
)

// store reads the API objects the zone is made of from informer caches.
type store struct {
	services   corelisters.ServiceLister
	svcIndex   cache.Indexer
	namespaces corelisters.NamespaceLister
	slices     cache.Indexer
	pods       cache.Indexer // nil unless Config.Pods is PodsVerified
	changes    *changes
	synced     []cache.InformerSynced
	isSynced   atomic.Bool
}

// newStore registers the Service, EndpointSlice and Namespace informers
// with f, and the Pod informer if verifyPods, adds the lookup indexes and
// the change tracking. The caller starts f.
func newStore(f informers.SharedInformerFactory, verifyPods bool) (*store, error) {
	svcs := f.Core().V1().Services()
	nss := f.Core().V1().Namespaces()
	eps := f.Discovery().V1().EndpointSlices()
	st := &store{
		services:   svcs.Lister(),
		svcIndex:   svcs.Informer().GetIndexer(),
		namespaces: nss.Lister(),
		slices:     eps.Informer().GetIndexer(),
		changes:    newChanges(),
	}
	type watched struct {
		inf     cache.SharedIndexInformer
		lookup  cache.Indexers
		changed func(obj any)
	}
	ws := []watched{
		{svcs.Informer(), cache.Indexers{clusterIPIndex: serviceIPs}, st.changes.serviceChanged},
		{eps.Informer(), cache.Indexers{serviceNameIndex: sliceServiceKey, sliceAddrIndex: sliceAddrs}, st.changes.sliceChanged},
		{nss.Informer(), nil, st.changes.namespaceChanged},
	}
	if verifyPods {
		pods := f.Core().V1().Pods()
		st.pods = pods.Informer().GetIndexer()
		ws = append(ws, watched{pods.Informer(), cache.Indexers{podIPIndex: podIPs}, st.changes.podChanged})
	}
	for _, w := range ws {
		if err := st.watch(w.inf, w.lookup, w.changed); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// watch adds the lookup indexes and the change tracking to inf.
func (st *store) watch(inf cache.SharedIndexInformer, lookup cache.Indexers, changed func(obj any)) error {
	if err := addIndexers(inf, lookup); err != nil {
		return err
	}
	if err := inf.AddIndexers(st.changes.indexers(changed)); err != nil {
		return fmt.Errorf("clusterdns: track changes: %w", err)
	}
	// A relist replaces the store at once: client-go then calls the index
	// functions for the objects listed but not for those that are gone.
	// Their delete events still arrive, shortly after.
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: changed}); err != nil {
		return fmt.Errorf("clusterdns: watch: %w", err)
	}
	st.synced = append(st.synced, inf.HasSynced)
	return nil
}

// addIndexers adds the lookup indexes unless another Server on the same
// factory already did.
func addIndexers(inf cache.SharedIndexInformer, lookup cache.Indexers) error {
	have := inf.GetIndexer().GetIndexers()
	missing := cache.Indexers{}
	for name, f := range lookup {
		if _, ok := have[name]; !ok {
			missing[name] = f
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := inf.AddIndexers(missing); err != nil {
		return fmt.Errorf("clusterdns: index: %w", err)
	}
	return nil
}

// sliceServiceKey is the index function for serviceNameIndex.
func sliceServiceKey(obj any) ([]string, error) {
	if key := sliceService(obj); key != "" {
		return []string{key}, nil
	}
	return nil, nil
}

// sliceService returns "<namespace>/<service>" of an EndpointSlice, or ""
// if obj is none or has no service-name label.
func sliceService(obj any) string {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
		return ""
	}
	return es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
}

// sliceAddrs is the index function for sliceAddrIndex: the addresses of
// ready endpoints, those DNS serves.
func sliceAddrs(obj any) ([]string, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || es.AddressType == discoveryv1.AddressTypeFQDN {
		return nil, nil
	}
	var out []string
	for _, ep := range es.Endpoints {
		if isReady(ep) {
			out = appendIPs(out, ep.Addresses...)
		}
	}
	return out, nil
}

// serviceIPs is the index function for clusterIPIndex. Headless and
// ExternalName Services have no ClusterIP.
func serviceIPs(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok || svc.Spec.Type == corev1.ServiceTypeExternalName || isHeadless(svc) {
		return nil, nil
	}
	var out []string
	for _, ip := range clusterIPs(svc) {
		out = append(out, ip.String())
	}
	return out, nil
}

// podIPs is the index function for podIPIndex. Pods that have finished or
// whose state is unknown are left out, as CoreDNS's Pod watch leaves them.
func podIPs(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !podListed(pod) {
		return nil, nil
	}
	raw := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		raw = append(raw, ip.IP)
	}
	out := appendIPs(nil, raw...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

func podListed(pod *corev1.Pod) bool {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
		return false
	}
	return true
}

// appendIPs appends the netip form of each address that parses.
func appendIPs(out []string, addrs ...string) []string {
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil {
			out = append(out, ip.String())
		}
	}
	return out
}

// hasSynced reports whether all informers have listed once.
func (st *store) hasSynced() bool {
	if st.isSynced.Load() {
		return true
	}
	for _, synced := range st.synced {
		if !synced() {
			return false
		}
	}
	st.isSynced.Store(true)
	return true
}

func (st *store) namespaceExists(name string) bool {
	_, err := st.namespaces.Get(name)
	return err == nil
}

// service returns the named Service, or nil if there is none.
func (st *store) service(namespace, name string) *corev1.Service {
	svc, err := st.services.Services(namespace).Get(name)
	if err != nil {
		return nil
	}
	return svc
}

// endpointSlices returns the Service's EndpointSlices sorted by name, so
// that answers have a stable order to start from.
func (st *store) endpointSlices(namespace, service string) []*discoveryv1.EndpointSlice {
	return sortedSlices(st.slices, serviceNameIndex, namespace+"/"+service)
}

// slicesWithAddr returns the EndpointSlices with a ready endpoint at ip,
// sorted by namespace and name.
func (st *store) slicesWithAddr(ip netip.Addr) []*discoveryv1.EndpointSlice {
	return sortedSlices(st.slices, sliceAddrIndex, ip.String())
}

func sortedSlices(idx cache.Indexer, index, value string) []*discoveryv1.EndpointSlice {
	objs, err := idx.ByIndex(index, value)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, obj := range objs {
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
			out = append(out, es)
		}
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out
}

// serviceWithIP returns the Service whose ClusterIP is ip, or nil. Should
// several claim it, the first by namespace and name wins.
func (st *store) serviceWithIP(ip netip.Addr) *corev1.Service {
	objs, err := st.svcIndex.ByIndex(clusterIPIndex, ip.String())
	if err != nil {
		return nil
	}
	var best *corev1.Service
	for _, obj := range objs {
		svc, ok := obj.(*corev1.Service)
		if ok && (best == nil || svc.Namespace+"/"+svc.Name < best.Namespace+"/"+best.Name) {
			best = svc
		}
	}
	return best
}

// addrsIndexed returns every ClusterIP and ready endpoint address known.
func (st *store) addrsIndexed() []string {
	return append(st.svcIndex.ListIndexFuncValues(clusterIPIndex),
		st.slices.ListIndexFuncValues(sliceAddrIndex)...)
}

// podHasIP reports whether a listed Pod in namespace has ip.
func (st *store) podHasIP(namespace string, ip netip.Addr) bool {
	objs, err := st.pods.ByIndex(podIPIndex, ip.String())
	if err != nil {
		return false
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Namespace == namespace {
			return true
		}
	}
	return false
}
