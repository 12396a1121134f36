package lab

import (
	"context"

	"github.com/pinlab/pinlab/internal/kubeapi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// api is the lab's API as kubeapi changes and waits on it: the cluster's
// client and informers (which startInformers runs), and the node's
// permanent waiting reasons.
func (l *Lab) api() kubeapi.Client {
	return kubeapi.Client{Clientset: l.Cluster.Client(), Factory: l.Cluster.Factory(), Permanent: permanent}
}

// permanent reports the waiting reasons the lab's kubelet never recovers
// from: it retries no image pull (an image it does not run stays
// ErrImagePull).
func permanent(_ *corev1.Pod, reason string) bool {
	switch reason {
	case "CreateContainerConfigError", "FailedCreatePodSandBox", "ErrImagePull":
		return true
	}
	return false
}

// Apply applies objects as kubectl apply does, whatever their order, and
// returns once the lab's informer caches hold them: kubeapi.Client.Apply.
// An object that exists already, such as the kube-system Namespace or the
// kube-dns Service every lab creates, is patched with what the given one
// changes. The first failure stops it; the error is the API's, so callers
// can read its field causes.
func (l *Lab) Apply(ctx context.Context, objs []runtime.Object) error {
	return l.api().Apply(ctx, objs)
}

// Scale sets the spec.replicas of a Deployment or StatefulSet (kind):
// kubeapi.Client.Scale.
func (l *Lab) Scale(ctx context.Context, kind, namespace, name string, replicas int32) error {
	return l.api().Scale(ctx, kind, namespace, name, replicas)
}

// UpdateTemplate changes the pod template of a Deployment or StatefulSet
// (kind) with edit, as kubectl set image or edit would; the workload's
// update strategy then rolls the change out. It returns once the lab's
// informer cache holds the written generation, so that a WaitReady that
// follows judges the new spec: kubeapi.Client.UpdateTemplate.
func (l *Lab) UpdateTemplate(ctx context.Context, kind, namespace, name string, edit func(*corev1.PodTemplateSpec)) error {
	return l.api().UpdateTemplate(ctx, kind, namespace, name, edit)
}
