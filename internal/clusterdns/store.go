package clusterdns

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// serviceNameIndex indexes EndpointSlices by "<namespace>/<service>" from
// their kubernetes.io/service-name label, so a query reads only the slices
// of one Service.
const serviceNameIndex = "clusterdns.pinlab/service-name"

// store reads the API objects the zone is made of from informer caches.
type store struct {
	services   corelisters.ServiceLister
	namespaces corelisters.NamespaceLister
	slices     cache.Indexer
	synced     []cache.InformerSynced
	isSynced   atomic.Bool
	serial     atomic.Uint32 // Unix time of the last API change
}

// newStore registers the Service, EndpointSlice and Namespace informers with
// f, adds the service-name index and watches for changes to keep the SOA
// serial. The caller starts f.
func newStore(f informers.SharedInformerFactory) (*store, error) {
	svcs := f.Core().V1().Services()
	nss := f.Core().V1().Namespaces()
	eps := f.Discovery().V1().EndpointSlices()
	if err := addServiceNameIndex(eps.Informer()); err != nil {
		return nil, err
	}
	st := &store{
		services:   svcs.Lister(),
		namespaces: nss.Lister(),
		slices:     eps.Informer().GetIndexer(),
	}
	st.touch()
	for _, inf := range []cache.SharedIndexInformer{svcs.Informer(), eps.Informer(), nss.Informer()} {
		if _, err := inf.AddEventHandler(st.changeHandler()); err != nil {
			return nil, fmt.Errorf("clusterdns: watch: %w", err)
		}
		st.synced = append(st.synced, inf.HasSynced)
	}
	return st, nil
}

func addServiceNameIndex(inf cache.SharedIndexInformer) error {
	err := inf.AddIndexers(cache.Indexers{serviceNameIndex: sliceServiceKey})
	if _, ok := inf.GetIndexer().GetIndexers()[serviceNameIndex]; ok {
		return nil // added now, or by another Server on the same factory
	}
	return fmt.Errorf("clusterdns: index EndpointSlices: %w", err)
}

// sliceServiceKey is the index function for serviceNameIndex.
func sliceServiceKey(obj any) ([]string, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := es.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{es.Namespace + "/" + name}, nil
}

// changeHandler moves the serial on every real change (not on resyncs).
func (st *store) changeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { st.touch() },
		UpdateFunc: func(old, cur any) {
			if resourceVersion(old) != resourceVersion(cur) {
				st.touch()
			}
		},
		DeleteFunc: func(any) { st.touch() },
	}
}

func resourceVersion(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

func (st *store) touch() { st.serial.Store(uint32(time.Now().Unix())) }

// hasSynced reports whether all three informers have listed once.
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
	objs, err := st.slices.ByIndex(serviceNameIndex, namespace+"/"+service)
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
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
