// Package kubelet runs the lab's pods: for each Pod object it allocates a pod
// IP, runs the pod's container in-process when its image is pinlab (a real
// grpc-go server from package pod, bound to the pod IP), probes readiness,
// reports status to the API, and on deletion runs the termination sequence
// before removing the object. It watches pods through a shared informer and
// writes only through the API client, like the real kubelet.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/pod"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config configures a kubelet. PodIPs is required; the rest have defaults.
type Config struct {
	// NodeName is reported in pod status; default "pinlab-node".
	NodeName string
	// NodeIP is the source address of probes and the pods' hostIP; default
	// 127.0.0.1.
	NodeIP netip.Addr
	// PodIPs hands out pod addresses (CNI host-local style).
	PodIPs *cluster.IPAM
	// Observe, if not nil, returns the observer for a pod's server.
	Observe func(*corev1.Pod) pod.Observer
	// Logger receives a few lifecycle logs; nil discards them.
	Logger *slog.Logger
}

// Kubelet runs pods. Create it with New before starting the informer
// factory, then call Run.
type Kubelet struct {
	cfg    Config
	client kubernetes.Interface
	lister corelisters.PodLister
	synced cache.InformerSynced
	queue  workqueue.TypedInterface[string]

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	wg      sync.WaitGroup
}

// New registers the kubelet's pod informer on factory.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, cfg Config) *Kubelet {
	if cfg.NodeName == "" {
		cfg.NodeName = "pinlab-node"
	}
	if !cfg.NodeIP.IsValid() {
		cfg.NodeIP = netip.MustParseAddr("127.0.0.1")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = cfg.Logger.With("component", "kubelet")
	inf := factory.Core().V1().Pods()
	k := &Kubelet{
		cfg:     cfg,
		client:  client,
		lister:  inf.Lister(),
		synced:  inf.Informer().HasSynced,
		queue:   workqueue.NewTyped[string](),
		workers: map[types.UID]*podWorker{},
	}
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			k.queue.Add(m.GetNamespace() + "/" + m.GetName())
		}
	}
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
		DeleteFunc: enqueue,
	})
	return k
}

// Run dispatches pod changes to per-pod workers until ctx ends. Then every
// pod's server is stopped at once (the node going away) and Run returns
// after all workers exited.
func (k *Kubelet) Run(ctx context.Context) error {
	defer k.wg.Wait()
	defer k.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), k.synced) {
		return nil
	}
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	for {
		key, quit := k.queue.Get()
		if quit {
			return nil
		}
		k.dispatch(ctx, key)
		k.queue.Done(key)
	}
}

// dispatch hands the current state of the pod named key to its worker,
// starting one for a new pod and telling workers of vanished pods.
func (k *Kubelet) dispatch(ctx context.Context, key string) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	p, err := k.lister.Pods(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for uid, w := range k.workers {
		if w.key == key && (p == nil || p.UID != uid) {
			w.gone()
		}
	}
	if p == nil {
		return
	}
	if w := k.workers[p.UID]; w != nil {
		w.update(p)
		return
	}
	if p.DeletionTimestamp != nil {
		// Terminating without a worker: it never ran here, or its worker
		// already finished and this is a late event. Nothing to stop; make
		// sure the object goes (a second delete is a no-op).
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			k.finish(ctx, p)
		}()
		return
	}
	w := newPodWorker(k, p)
	// Allocating here, in the order pods arrive, rather than in the
	// workers keeps pod IPs repeatable for a seed.
	w.ip, w.ipErr = k.cfg.PodIPs.Allocate()
	k.workers[p.UID] = w
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		w.run(ctx)
		k.mu.Lock()
		delete(k.workers, p.UID)
		k.mu.Unlock()
	}()
}

// finish removes a terminated pod's object (grace period zero).
func (k *Kubelet) finish(ctx context.Context, p *corev1.Pod) {
	zero := int64(0)
	uid := p.UID
	err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.cfg.Logger.Warn("kubelet: delete terminated pod", "pod", p.Name, "err", err)
	}
}

// ErrNoPod is returned for a pod this kubelet does not run.
var ErrNoPod = errors.New("kubelet: no such pod running")

// SetReady forces a running pod's Ready condition false (ready false), as
// a readiness probe that starts failing would, while its server keeps
// serving; ready true hands readiness back to the probe. The EndpointSlice
// controller then drops (or restores) the pod's endpoints; connections
// already open stay up.
func (k *Kubelet) SetReady(namespace, name string, ready bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := namespace + "/" + name
	for _, w := range k.workers {
		if w.key == key {
			w.setUnready(!ready)
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrNoPod, key)
}
