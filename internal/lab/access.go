package lab

import (
	"context"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Narrow views of a running lab for its users (the runner, the control
// API), so that they need not reach through the cluster's informers.

// Pod returns the pod namespace/name as the informer cache holds it.
func (l *Lab) Pod(namespace, name string) (*corev1.Pod, error) {
	return l.Cluster.Factory().Core().V1().Pods().Lister().Pods(namespace).Get(name)
}

// Pods returns the pods of namespace whose labels match selector, as the
// informer cache holds them.
func (l *Lab) Pods(namespace string, selector map[string]string) ([]*corev1.Pod, error) {
	return l.Cluster.Factory().Core().V1().Pods().Lister().Pods(namespace).List(labels.SelectorFromSet(selector))
}

// Service returns the Service namespace/name as the informer cache holds
// it.
func (l *Lab) Service(namespace, name string) (*corev1.Service, error) {
	return l.Cluster.Factory().Core().V1().Services().Lister().Services(namespace).Get(name)
}

// WatchPods calls h for every pod event from now on (and an add for each
// pod already cached), on the informer's goroutine, until the lab stops.
func (l *Lab) WatchPods(h cache.ResourceEventHandler) error {
	_, err := l.Cluster.Factory().Core().V1().Pods().Informer().AddEventHandler(h)
	return err
}

// DeletePod deletes a pod through the API, as kubectl delete pod: it
// terminates gracefully; grace overrides its terminationGracePeriodSeconds
// (nil keeps it).
func (l *Lab) DeletePod(ctx context.Context, namespace, name string, grace *int64) error {
	return l.api().DeletePod(ctx, namespace, name, grace)
}

// AllocateIP takes a free address of the pod network, for a client that
// should look like a pod (load clients, proxies). It is not returned. On
// a pod network that gives each pod its own namespace (API.PodNetwork)
// the address is made local to the node, where the client or proxy runs.
func (l *Lab) AllocateIP() (netip.Addr, error) {
	ip, err := l.Cluster.PodIPs().Allocate()
	if err == nil && l.podNet != nil {
		if err = l.podNet.Local(ip); err != nil {
			l.Cluster.PodIPs().Release(ip)
		}
	}
	return ip, err
}

// PodCIDR is the lab's pod network.
func (l *Lab) PodCIDR() netip.Prefix { return l.Cluster.Config().PodCIDR }

// NodeIP returns the node's address: the kubelet's probes come from it
// (127.0.0.1 on the embedded control plane, NodeIP(PodCIDR) on a real
// one).
func (l *Lab) NodeIP() netip.Addr { return l.nodeIP }

// Informers returns the lab's informer factory, for components a user of
// the lab starts beside it (an L7 proxy); call StartInformers after adding
// informers.
func (l *Lab) Informers() informers.SharedInformerFactory { return l.Cluster.Factory() }

// StartInformers starts informers added since the lab started; they run
// until the lab stops.
func (l *Lab) StartInformers() { l.Cluster.Factory().Start(l.runCtx.Done()) }

// RolloutRestart restarts a Deployment's or StatefulSet's (kind) pods as
// kubectl rollout restart does: a new template annotation starts a rollout.
func (l *Lab) RolloutRestart(ctx context.Context, kind, namespace, name string) error {
	return l.api().RolloutRestart(ctx, kind, namespace, name)
}

// Snapshot is a lab's objects as its informer caches hold them.
type Snapshot struct {
	Services       []corev1.Service
	Pods           []corev1.Pod
	EndpointSlices []discoveryv1.EndpointSlice
	Deployments    []appsv1.Deployment
	StatefulSets   []appsv1.StatefulSet
}

// Objects lists the lab's objects from its informer caches (copies).
func (l *Lab) Objects() Snapshot {
	f := l.Cluster.Factory()
	var o Snapshot
	all := labels.Everything()
	svcs, _ := f.Core().V1().Services().Lister().List(all)
	for _, x := range svcs {
		o.Services = append(o.Services, *x)
	}
	pods, _ := f.Core().V1().Pods().Lister().List(all)
	for _, x := range pods {
		o.Pods = append(o.Pods, *x)
	}
	slices, _ := f.Discovery().V1().EndpointSlices().Lister().List(all)
	for _, x := range slices {
		o.EndpointSlices = append(o.EndpointSlices, *x)
	}
	ds, _ := f.Apps().V1().Deployments().Lister().List(all)
	for _, x := range ds {
		o.Deployments = append(o.Deployments, *x)
	}
	ss, _ := f.Apps().V1().StatefulSets().Lister().List(all)
	for _, x := range ss {
		o.StatefulSets = append(o.StatefulSets, *x)
	}
	return o
}

// ServiceCIDR is the lab's Service network.
func (l *Lab) ServiceCIDR() netip.Prefix { return l.Cluster.Config().ServiceCIDR }

// Client is the lab's API client.
func (l *Lab) Client() kubernetes.Interface { return l.Cluster.Client() }

// KillPod kills a pod's container (SIGKILL) as the kubelet sees a crash:
// the container restarts as its restartPolicy says.
func (l *Lab) KillPod(namespace, name string) error { return l.Kubelet.Kill(namespace, name) }

// HangPod stops (hang) or resumes a pod's answers, as a process stuck in
// a long GC pause or a deadlock would.
func (l *Lab) HangPod(namespace, name string, hang bool) error {
	return l.Kubelet.Hang(namespace, name, hang)
}

// SetPodReady makes a pod's readiness probe pass or fail.
func (l *Lab) SetPodReady(namespace, name string, ready bool) error {
	return l.Kubelet.SetReady(namespace, name, ready)
}

// SetPodHealthy makes a pod's liveness probe pass or fail.
func (l *Lab) SetPodHealthy(namespace, name string, healthy bool) error {
	return l.Kubelet.SetHealthy(namespace, name, healthy)
}
