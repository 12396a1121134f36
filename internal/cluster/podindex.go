package cluster

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// podControllerUIDIndex indexes the pod informer's cache by the UID of each
// pod's controller, as kube-controller-manager's
// controller.AddPodControllerUIDIndexer does for its ReplicaSet and
// StatefulSet controllers, so a sync reads its own pods instead of every
// pod in the namespace.
const podControllerUIDIndex = "podControllerUID"

// addPodControllerUIDIndex adds the index to the pod informer unless it has
// it already. AddIndexers fails only on an informer that has stopped, when
// no sync reads it any more.
func addPodControllerUIDIndex(inf cache.SharedIndexInformer) {
	if _, ok := inf.GetIndexer().GetIndexers()[podControllerUIDIndex]; ok {
		return
	}
	_ = inf.AddIndexers(cache.Indexers{podControllerUIDIndex: func(obj any) ([]string, error) {
		if ref := metav1.GetControllerOfNoCopy(obj.(metav1.Object)); ref != nil {
			return []string{string(ref.UID)}, nil
		}
		return nil, nil
	}})
}

// podsControlledBy returns the cached pods of namespace ns whose controller
// has uid.
func podsControlledBy(idx cache.Indexer, ns string, uid types.UID) ([]*corev1.Pod, error) {
	objs, err := idx.ByIndex(podControllerUIDIndex, string(uid))
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p := o.(*corev1.Pod); p.Namespace == ns {
			pods = append(pods, p)
		}
	}
	return pods, nil
}
