// Package cluster is the lab's embedded Kubernetes control plane: an
// in-memory API (the client-go fake clientset, with reactors that add the
// API server behaviour the lab relies on: defaulting, validation, ClusterIP
// allocation, status subresources, metadata.generation, patches and graceful
// pod deletion) and the controllers that turn Deployments into ReplicaSets
// (rolling updates, Recreate, proportional scaling), ReplicaSets into Pods,
// StatefulSets into ordinal Pods (with revisions and rolling updates) and
// Services into EndpointSlices. Every component writes through the
// clientset and reads the API through shared informers, as Kubernetes
// components do, so they could run against a real API server; the
// Deployment and StatefulSet controllers read their own objects fresh from
// the API, since the fake API has no resourceVersion preconditions.
package cluster

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// Defaults for Config.
var (
	DefaultPodCIDR     = netip.MustParsePrefix("127.244.0.0/16")
	DefaultServiceCIDR = netip.MustParsePrefix("127.96.0.0/16")
)

// watchBuffer is the event buffer of the fake API's watchers. The fake
// clientset panics when a watcher's buffer is full; a scale-up of hundreds of
// pods produces bursts of events, so the lab raises client-go's default of
// 100. It is a process-wide setting of apimachinery.
const watchBuffer = 20000

var raiseWatchBuffer sync.Once

// Config describes a cluster. The zero value is a cluster with the default
// address ranges.
type Config struct {
	// PodCIDR is the range pod IPs come from; default 127.244.0.0/16.
	PodCIDR netip.Prefix
	// ServiceCIDR is the range ClusterIPs come from; default 127.96.0.0/16.
	ServiceCIDR netip.Prefix
	// DNSIP is the ClusterIP of the kube-dns Service, reserved at start;
	// default the tenth address of ServiceCIDR (127.96.0.10).
	DNSIP netip.Addr
	// Seed seeds generated names and ClusterIP picks; 0 means time-seeded.
	Seed uint64
	// Logger receives a few component logs; nil discards them.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if !c.PodCIDR.IsValid() {
		c.PodCIDR = DefaultPodCIDR
	}
	if !c.ServiceCIDR.IsValid() {
		c.ServiceCIDR = DefaultServiceCIDR
	}
	if !c.DNSIP.IsValid() {
		a := c.ServiceCIDR.Masked().Addr().As4()
		a[3] += 10
		c.DNSIP = netip.AddrFrom4(a)
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Cluster is one in-memory control plane.
type Cluster struct {
	cfg       Config
	client    kubernetes.Interface
	fake      *fake.Clientset // nil for a real API server (Connect)
	factory   informers.SharedInformerFactory
	podIPs    *IPAM
	serviceIP *IPAM

	rmu     sync.Mutex
	streams map[string]*rand.Rand // one per purpose, so the seed repeats each
}

// New returns a cluster with namespaces default and kube-system and the
// kube-dns Service (selector-less, at DNSIP, so its address is the one the
// lab's DNS server binds). Components register their informers on Factory
// before the caller starts it.
func New(cfg Config) (*Cluster, error) {
	cfg.setDefaults()
	raiseWatchBuffer.Do(func() {
		if watch.DefaultChanSize < watchBuffer {
			watch.DefaultChanSize = watchBuffer
		}
	})
	podIPs, err := NewIPAM(cfg.PodCIDR)
	if err != nil {
		return nil, err
	}
	serviceIPs, err := NewIPAM(cfg.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	fakeAPI := fake.NewSimpleClientset()
	c := &Cluster{
		cfg: cfg,
		// The plain object tracker, not fake.NewClientset's field-managed
		// one: that one builds a REST mapper over every type in the scheme
		// and a field manager on every write, half the CPU of a 1000-pod
		// start-up (41% the REST mapper alone), for managedFields and
		// server-side apply ownership, which nothing in the lab reads. The
		// store, resourceVersions and watches are the same tracker's.
		client:    fakeAPI,
		fake:      fakeAPI,
		podIPs:    podIPs,
		serviceIP: serviceIPs,
		streams:   map[string]*rand.Rand{},
	}
	c.installAPI()
	c.factory = informers.NewSharedInformerFactory(c.client, 0)
	if err := c.bootstrap(); err != nil {
		return nil, err
	}
	return c, nil
}

// Client returns the API client; every write goes through it.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Factory returns the shared informer factory of this cluster.
func (c *Cluster) Factory() informers.SharedInformerFactory { return c.factory }

// PodIPs returns the allocator for pod addresses, shared by the kubelet and
// by anything else that acts as a pod on the pod network (load clients).
func (c *Cluster) PodIPs() *IPAM { return c.podIPs }

// DNSIP returns the kube-dns ClusterIP.
func (c *Cluster) DNSIP() netip.Addr { return c.cfg.DNSIP }

// Config returns the cluster's configuration with defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

func (c *Cluster) bootstrap() error {
	ctx := context.Background()
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := c.client.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("cluster: create namespace %s: %w", ns, err)
		}
	}
	if _, err := c.client.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, kubeDNSService(c.cfg.DNSIP), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cluster: create kube-dns Service: %w", err)
	}
	return nil
}

// kubeDNSService is the kube-system/kube-dns Service, selector-less at ip,
// as kubeadm's (labels k8s-app=kube-dns) with CoreDNS's name label.
func kubeDNSService(ip netip.Addr) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip.String(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// Run runs the controllers (Deployment, ReplicaSet, StatefulSet, EndpointSlice) until ctx
// ends and housekeeps the fake API; ctrls is nil for a cluster from Connect. The informer factory must have been
// started by the caller; Run returns after every controller goroutine exited.
func (c *Cluster) Run(ctx context.Context, ctrls *Controllers) error {
	var wg sync.WaitGroup
	var runs []func(context.Context)
	if ctrls != nil { // nil under a real control plane (Connect)
		runs = ctrls.runs
	}
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
			// The fake clientset records every action for test assertions;
			// a lab runs for long, so drop the record.
			if c.fake != nil {
				c.fake.ClearActions()
			}
		}
	}
}

// stream returns the random source for one purpose (e.g. the names of one
// resource). Separate streams keep each sequence repeatable for a seed no
// matter how other components interleave. Callers hold c.rmu.
func (c *Cluster) stream(purpose string) *rand.Rand {
	r := c.streams[purpose]
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(purpose))
		r = rand.New(rand.NewPCG(c.cfg.Seed, h.Sum64()))
		c.streams[purpose] = r
	}
	return r
}

// randString returns n characters for a generated name of resource.
func (c *Cluster) randString(resource string, n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789" // as apimachinery's rand.String
	c.rmu.Lock()
	defer c.rmu.Unlock()
	r := c.stream("names/" + resource)
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func (c *Cluster) randomServiceIP() (netip.Addr, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.serviceIP.AllocateRandom(c.stream("clusterIPs"))
}

// Connect returns a Cluster over a real API server (client): the lab's
// informers, pod addresses and kube-dns Service, without the embedded API's
// reactors and without controllers: the control plane's own
// kube-controller-manager and kube-scheduler do that work (pass nil
// Controllers to Run). It creates the kube-dns Service at DNSIP in
// kube-system, or checks that an existing one has that ClusterIP. The
// namespaces default and kube-system come from the API server.
func Connect(ctx context.Context, client kubernetes.Interface, cfg Config) (*Cluster, error) {
	cfg.setDefaults()
	podIPs, err := NewIPAM(cfg.PodCIDR)
	if err != nil {
		return nil, err
	}
	serviceIPs, err := NewIPAM(cfg.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg:       cfg,
		client:    client,
		podIPs:    podIPs,
		serviceIP: serviceIPs,
		streams:   map[string]*rand.Rand{},
		factory:   informers.NewSharedInformerFactory(client, 0),
	}
	// A lab that ran on this API server before left its kube-dns Service:
	// read it first (creating it again is refused as "IP already
	// allocated", not as already existing).
	svcs := client.CoreV1().Services(metav1.NamespaceSystem)
	s, err := svcs.Get(ctx, "kube-dns", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s, err = svcs.Create(ctx, kubeDNSService(cfg.DNSIP), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = svcs.Get(ctx, "kube-dns", metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: create kube-dns Service: %w", err)
	}
	if s.Spec.ClusterIP != cfg.DNSIP.String() {
		return nil, fmt.Errorf("cluster: the API server's kube-system/kube-dns Service has ClusterIP %s; the lab's DNS serves %s", s.Spec.ClusterIP, cfg.DNSIP)
	}
	return c, nil
}

// Embedded reports whether the cluster is the in-memory API (New) rather
// than a real API server (Connect).
func (c *Cluster) Embedded() bool { return c.fake != nil }
