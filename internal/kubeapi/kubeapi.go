// Package kubeapi is a cluster's API as pinlab changes and waits on it,
// through client-go and shared informers, for any API server: the
// embedded one of a lab (internal/cluster) or a real cluster's. It applies
// objects as kubectl apply does, scales, edits and restarts workloads,
// deletes pods, and waits until workloads have their pods Ready, naming
// what is short.
package kubeapi

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// Client changes a cluster through Clientset and reads it back through
// Factory's informer caches, so that a wait that follows a change sees it.
// It is a value of references: copies share the API and the caches. Safe
// for concurrent use as far as the API is: two changes of one workload at
// once may meet a conflict, which is the API's error. Errors are the
// API's, unwrapped, so that callers can read them with apierrors (field
// causes, NotFound, Conflict); the Client's own are prefixed "kubeapi:".
type Client struct {
	// Clientset writes: creates, patches, updates, deletes. Required.
	Clientset kubernetes.Interface

	// Factory's informer caches are what the Client reads. It uses the
	// informers of Namespaces, Services, Pods, Deployments, StatefulSets
	// and EndpointSlices (AddInformers asks for them); the caller starts
	// them (Factory.Start) and they must run while the Client is used:
	// Apply, Scale, UpdateTemplate and WaitWorkloads wait on them until
	// their ctx ends. Required.
	Factory informers.SharedInformerFactory

	// Permanent reports whether a pod whose container waits with reason
	// (its State.Waiting.Reason, given with a message) will never turn
	// Ready, so that WaitWorkloads fails at once instead of when its ctx
	// ends. It is called on WaitWorkloads' goroutine with the pod as the
	// informer cache holds it, which it must not change. nil: no reason is
	// permanent. A lab's node never retries CreateContainerConfigError,
	// FailedCreatePodSandBox or ErrImagePull; a real kubelet retries an
	// image pull (ErrImagePull, then ImagePullBackOff), so a policy for a
	// real cluster gives up on those only once the pod has waited long
	// enough (its CreationTimestamp says since when).
	Permanent func(pod *corev1.Pod, reason string) bool

	// Namespaces limits WaitWorkloads to the Deployments and StatefulSets
	// of these namespaces; nil or empty: every namespace the informers
	// see. Apply, Scale and the other changes act where they are told.
	Namespaces []string
}

// AddInformers asks Factory for every informer the Client reads, so that
// the caller's next Factory.Start starts them; call it before Start.
func (c Client) AddInformers() {
	c.Factory.Core().V1().Namespaces().Informer()
	c.Factory.Core().V1().Services().Informer()
	c.Factory.Core().V1().Pods().Informer()
	c.Factory.Apps().V1().Deployments().Informer()
	c.Factory.Apps().V1().StatefulSets().Informer()
	c.Factory.Discovery().V1().EndpointSlices().Informer()
}

// WorkloadRef names a Deployment or StatefulSet.
type WorkloadRef struct {
	Kind, Namespace, Name string // Kind is "Deployment" or "StatefulSet"
}

// namespace is o's namespace, "default" when it names none (as kubectl
// apply without -n).
func namespace(o metav1.Object) string {
	if o.GetNamespace() == "" {
		return metav1.NamespaceDefault
	}
	return o.GetNamespace()
}
