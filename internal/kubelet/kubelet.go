// Package kubelet runs the lab's pods: for each Pod object it allocates a pod
// IP, runs the pod's container in-process when its image is pinlab (a real
// grpc-go server from package pod and, for a pod with an HTTP port, the
// same package's HTTP/1.1 and WebSocket server beside it, both bound to
// the pod IP; or, for a container whose args start with "load", the
// image's load client through Config.LoadClient, or "xds" its xDS control
// plane through Config.XDSServer), runs its startup,
// liveness and readiness probes, restarts it after crashes with the
// kubelet's crash-loop back-off, reports status to the API, and on deletion
// runs the kubelet's termination sequence (preStop hook, SIGTERM, SIGKILL at
// the end of the grace period) before removing the object. It watches pods
// through a shared informer and writes only through the API client, like the
// real kubelet. Kill, Hang and SetReady inject failures. README.md describes
// the lifecycle and what differs from Kubernetes.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podnet"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Dead-address modes for Config.DeadAddress.
const (
	// DeadRefuse: nothing listens on a deleted pod's address, so connects
	// are refused (ECONNREFUSED), as on a node where the pod's IP is still
	// routed but nothing owns it. With Config.PodNetwork the address has
	// no namespace left behind the bridge: connects fail with "no route
	// to host" (EHOSTUNREACH) after the node's ARP gives up, about 3 s,
	// as on a real node after the CNI removed the pod.
	DeadRefuse = "refuse"
	// DeadBlackhole: SYNs to a deleted pod's address go unanswered, so
	// connects time out, as when the IP is no longer routed anywhere (see
	// pod.Blackhole). Needs Linux.
	DeadBlackhole = "blackhole"
)

// Config configures a kubelet. PodIPs is required; the rest have defaults.
type Config struct {
	// NodeName is reported in pod status; default "pinlab-node".
	NodeName string
	// Register makes this kubelet a node of a real control plane, as the
	// kubelet is: Run first registers the Node NodeName (Ready, address
	// NodeIP, capacity for MaxPods pods) and its Lease in kube-node-lease,
	// then renews the Lease every 10 s and the Node's status every minute,
	// and it runs only the pods the scheduler bound to it (spec.nodeName),
	// leaving the others alone. False (the embedded lab, which has no
	// scheduler): no Node, and every pod runs here.
	Register bool
	// MaxPods is the registered Node's pod capacity; default
	// DefaultMaxPods.
	MaxPods int
	// APIPort is the port the kubelet API is served on (package
	// kubeletapi), which a registered Node reports in
	// status.daemonEndpoints for the API server to reach it; 0: none.
	APIPort int32
	// NodeIP is the source address of probes and the pods' hostIP; default
	// 127.0.0.1.
	NodeIP netip.Addr
	// PodIPs hands out pod addresses (CNI host-local style).
	PodIPs *cluster.IPAM
	// ClusterDNS is the cluster DNS's address the pods' resolv.conf names
	// (the kubelet's --cluster-dns); invalid: none. The domain is
	// ClusterDomain.
	ClusterDNS netip.Addr
	// PodNetwork, if not nil, gives each pod its own network namespace
	// (a pod sandbox, package podnet) at the address PodIPs handed out,
	// made before its first container starts and removed when its
	// address is given up; the pod's servers listen there, and a load
	// client's container dials from there (LoadContainer.Dial). Nil:
	// pods share the node's namespace, their addresses local on lo.
	PodNetwork PodNetwork
	// Observe, if not nil, returns the observer for a pod's servers: the
	// gRPC server and, for a pod with an HTTP port, the web server (HTTP
	// requests and WebSocket messages by route, see package webapi). It is
	// called once per container start.
	Observe func(*corev1.Pod) pod.Observer
	// Logger receives a few lifecycle logs; nil discards them.
	Logger *slog.Logger
	// RestartBackoff is the crash-loop back-off's base: the wait before the
	// second restart after a crash, doubling per restart up to 30 times the
	// base. Default 10s, the kubelet's (maximum 5 min); shorten it to keep
	// scenarios short.
	RestartBackoff time.Duration
	// DeadAddress is what a deleted pod's address does: DeadRefuse (the
	// default, also for "") or DeadBlackhole. Blackholed addresses stay out
	// of PodIPs' pool, so no later pod gets them, until Run returns.
	DeadAddress string
	// Events, if not nil, is told about container lifecycle events of a
	// pod as they happen (at): "prestop-start", "prestop-done", "sigterm",
	// "graceful-stop-done", "hard-stop" (the termination sequence, also for
	// a liveness or startup probe restart), "killed", "restarted", "hung",
	// "unhung". It is called from the kubelet's goroutines, concurrently for
	// different pods; it must be quick and must not modify pod.
	Events func(pod *corev1.Pod, event string, at time.Time)
	// Images are the digests ("sha256:<hex>") of images the node holds as
	// the pinlab image (what `pinlab image build` made: the index's digest
	// and its image for the node's platform, package imagebuild's
	// LayoutDigests): a
	// container whose image is pinned to one ("<any repository>@sha256:...")
	// runs as image pinlab does, whatever its repository is called. Images
	// named pinlab run without it (workload.IsPinlabImage); any other
	// image waits with ErrImagePull, as a node that cannot pull it.
	Images []string
	// LoadClient, if not nil, runs the containers of the pinlab image
	// whose args start with "load" (workload.Command): the image's load
	// client, in-process, on the pod IP (see LoadContainer). The lab's
	// engines give it package loadpod's Main; the kubelet does not import
	// the load clients itself, which would make the lab reach the run's
	// plan. Nil: such a container cannot start (exit 1, saying so).
	LoadClient LoadClient
	// XDSServer, if not nil, runs the containers of the pinlab image
	// whose args start with "xds" (workload.XDSCommand): the image's xDS
	// control plane, in-process, listening on the pod IP, with the pod's
	// service-account credentials (see XDSContainer). The lab's engines
	// give it package xds's Main. Nil: such a container cannot start
	// (exit 1, saying so).
	XDSServer XDSServer
	// APIServer is the API server as the node's pods reach it. The
	// in-cluster credentials of an in-process container
	// (XDSContainer.REST) take its address and CA, and a token the node
	// requests for the pod's service account (see inClusterConfig); its
	// own credentials are not used. Nil: the node gives none, and such a
	// container fails as rest.InClusterConfig does outside a cluster.
	APIServer *rest.Config
}

// ClusterDomain is the cluster's DNS domain (the kubelet's
// --cluster-domain).
const ClusterDomain = "cluster.local"

// PodNetwork makes and removes pods' network namespaces; package podnet's
// Network is one. Its methods are called concurrently for different pods.
type PodNetwork interface {
	// Add makes pod id's namespace with address ip.
	Add(ctx context.Context, id string, ip netip.Addr) (*podnet.Sandbox, error)
	// Remove tears sb down.
	Remove(ctx context.Context, sb *podnet.Sandbox) error
	// Local makes ip, a pod-range address no pod gets (a load client's,
	// a proxy's), local to the node.
	Local(ip netip.Addr) error
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
	holes   map[netip.Addr]io.Closer // blackholed dead addresses
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
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = DefaultMaxPods
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = 10 * time.Second
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
		holes:   map[netip.Addr]io.Closer{},
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
// pod's server is stopped at once (the node going away), blackholed
// addresses are freed and returned to the pool, and Run returns after all
// workers exited. It returns an error at once for an unknown
// Config.DeadAddress.
func (k *Kubelet) Run(ctx context.Context) error {
	switch k.cfg.DeadAddress {
	case "", DeadRefuse, DeadBlackhole:
	default:
		return fmt.Errorf("kubelet: unknown DeadAddress %q (want %q or %q)", k.cfg.DeadAddress, DeadRefuse, DeadBlackhole)
	}
	defer k.closeHoles()
	defer k.wg.Wait()
	defer k.queue.ShutDown()
	if k.cfg.Register {
		// As the kubelet, keep trying to register until the API server
		// takes it (or the lab stops).
		for err := k.registerNode(ctx); err != nil; err = k.registerNode(ctx) {
			k.cfg.Logger.Warn("kubelet: registering the node", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			k.heartbeat(ctx)
		}()
	}
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
	if p != nil && k.cfg.Register && p.Spec.NodeName != k.cfg.NodeName {
		p = nil // not bound here (yet): the real kubelet's informer selects spec.nodeName
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

// ErrNotRunning is returned by Kill and Hang for a pod whose container is
// not running (not started yet, in crash-loop back-off, or exited).
var ErrNotRunning = errors.New("kubelet: container not running")

// worker returns the worker of the pod namespace/name.
func (k *Kubelet) worker(namespace, name string) (*podWorker, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := namespace + "/" + name
	for _, w := range k.workers {
		if w.key == key {
			return w, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrNoPod, key)
}

// Kill crashes a pod's container, as SIGKILL or the OOM killer would: its
// servers stop at once: every gRPC connection is reset (RST, no GOAWAY), so
// in-flight calls fail with UNAVAILABLE, and the web server's connections
// and WebSockets close without a reply or close frame (pod.WebServer.Kill).
// The container then ends with exit code 137 and restarts per
// restartPolicy after the crash-loop back-off, on the same pod IP; it is
// not Ready until its probes pass again. Errors wrap ErrNoPod or
// ErrNotRunning.
func (k *Kubelet) Kill(namespace, name string) error {
	w, err := k.worker(namespace, name)
	if err != nil {
		return err
	}
	c, err := w.running()
	if err != nil {
		return err
	}
	w.mu.Lock()
	already := c.killed
	c.killed = true
	p := w.pod
	w.mu.Unlock()
	if already {
		return fmt.Errorf("%w: %s/%s is already killed", ErrNotRunning, namespace, name)
	}
	// The event goes first: the container's exit, which Kill causes,
	// starts its restart on another goroutine, whose "restarted" must not
	// come before it (seen under -race on a loaded machine).
	w.event(p, "killed")
	c.srv.Kill()
	return nil
}

// Hang makes a pod's container hang (hang true) or recover (false), as a
// process stuck in a deadlock: new connects to it time out (its address is
// blackholed, see pod.Blackhole) and calls on open connections stall until
// their deadlines, so probes fail too (a liveness probe then restarts it).
// Only the gRPC server hangs: a web server beside it keeps serving (and
// httpGet probes keep passing). A hung container ignores SIGTERM, on both
// servers: deleting the pod stops it hard at the end of the grace period.
// A restart ends the hang. Errors wrap ErrNoPod or ErrNotRunning, or say
// why the address could not be blackholed.
func (k *Kubelet) Hang(namespace, name string, hang bool) error {
	w, err := k.worker(namespace, name)
	if err != nil {
		return err
	}
	c, err := w.running()
	if err != nil {
		return err
	}
	w.mu.Lock()
	same := c.hung == hang
	p := w.pod
	w.mu.Unlock()
	if same {
		return nil
	}
	srv, err := serving(c, namespace, name)
	if err != nil {
		return err
	}
	if err := srv.Hang(context.Background(), hang); err != nil {
		if errors.Is(err, pod.ErrNotServing) {
			return fmt.Errorf("%w: %s/%s is not listening", ErrNotRunning, namespace, name)
		}
		return fmt.Errorf("kubelet: %w", err)
	}
	w.mu.Lock()
	c.hung = hang
	w.mu.Unlock()
	if hang {
		w.event(p, "hung")
	} else {
		w.event(p, "unhung")
	}
	return nil
}

// SetHealthy makes a running pod's application unhealthy (healthy false) or
// healthy again, see pod.Server.SetHealthy: its gRPC health for
// pricing.v1.Pricing turns NOT_SERVING and its calls fail, while the
// kubelet's probes (TCP, or gRPC health without a service) still pass, so
// the pod stays Ready and listed. The web server, if any, is not affected.
// A restarted container starts healthy.
// Errors wrap ErrNoPod or ErrNotRunning.
func (k *Kubelet) SetHealthy(namespace, name string, healthy bool) error {
	w, err := k.worker(namespace, name)
	if err != nil {
		return err
	}
	c, err := w.running()
	if err != nil {
		return err
	}
	srv, err := serving(c, namespace, name)
	if err != nil {
		return err
	}
	srv.SetHealthy(healthy)
	return nil
}

// serving returns c's process as the server of the pod's calls, or an
// error for the image's load client, which serves none.
func serving(c *container, namespace, name string) (server, error) {
	srv, ok := c.srv.(server)
	if !ok {
		return nil, fmt.Errorf("kubelet: %s/%s runs the load client, which serves no calls to hang or make unhealthy", namespace, name)
	}
	return srv, nil
}

// blackhole makes ip's ports drop SYNs until Run returns, keeping ip out
// of the pool; it reports whether it managed to (for every port).
func (k *Kubelet) blackhole(ctx context.Context, ip netip.Addr, ports []int, sb *podnet.Sandbox) bool {
	var holes holes
	var ns pod.Netns
	if sb != nil {
		ns = sb
	}
	for _, port := range ports {
		b, err := pod.NewBlackhole(ctx, netip.AddrPortFrom(ip, uint16(port)), ns)
		if err != nil {
			holes.Close()
			k.cfg.Logger.Warn("kubelet: dead address refuses instead of blackholing", "ip", ip, "port", port, "err", err)
			return false
		}
		holes = append(holes, b)
	}
	if sb != nil {
		holes = append(holes, sandboxCloser{k, sb}) // after the blackholes in it
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holes[ip] = holes
	return true
}

// holes are the blackholes of one dead address.
type holes []io.Closer

func (h holes) Close() error {
	var errs []error
	for _, b := range h {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}

// sandboxCloser removes a pod's network namespace.
type sandboxCloser struct {
	k  *Kubelet
	sb *podnet.Sandbox
}

func (s sandboxCloser) Close() error { return s.k.removeSandbox(s.sb) }

// sandboxTimeout bounds a pod network's teardown (CNI DEL).
const sandboxTimeout = 30 * time.Second

// removeSandbox tears sb down, bounded by sandboxTimeout whatever the
// caller's context (a node shutting down still removes its pods'
// networks); a failure is logged.
func (k *Kubelet) removeSandbox(sb *podnet.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.Background(), sandboxTimeout)
	defer cancel()
	err := k.cfg.PodNetwork.Remove(ctx, sb)
	if err != nil {
		k.cfg.Logger.Warn("kubelet: removing a pod's network", "pod", sb.ID, "err", err)
	}
	return err
}

// closeHoles frees the blackholed addresses and their IPs.
func (k *Kubelet) closeHoles() {
	k.mu.Lock()
	holes := k.holes
	k.holes = map[netip.Addr]io.Closer{}
	k.mu.Unlock()
	// Outside the lock: a pod network's teardown may take a while.
	for ip, b := range holes {
		if b.Close() == nil {
			k.cfg.PodIPs.Release(ip)
		}
	}
}

// SetReady forces a running pod's Ready condition false (ready false), as
// a readiness probe that starts failing would, while its server keeps
// serving; ready true hands readiness back to the probe. The EndpointSlice
// controller then drops (or restores) the pod's endpoints; connections
// already open stay up. The setting outlives container restarts.
func (k *Kubelet) SetReady(namespace, name string, ready bool) error {
	w, err := k.worker(namespace, name)
	if err != nil {
		return err
	}
	w.setUnready(!ready)
	return nil
}
