package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
)

// PodTemplateHashLabel is the label the Deployment controller puts on its
// ReplicaSets and their pods.
const PodTemplateHashLabel = appsv1.DefaultDeploymentUniqueLabelKey

// deploymentController keeps one ReplicaSet per pod template of a Deployment
// and sizes them (kube-controller-manager's deployment controller). The
// ReplicaSet of the current template gets spec.replicas; ReplicaSets of older
// templates are scaled to zero at once (the Recreate strategy's end state).
type deploymentController struct {
	c        *Cluster
	w        *worker
	dLister  appslisters.DeploymentLister
	rsLister appslisters.ReplicaSetLister
}

func newDeploymentController(c *Cluster) *deploymentController {
	d := c.factory.Apps().V1().Deployments()
	rs := c.factory.Apps().V1().ReplicaSets()
	dc := &deploymentController{c: c, dLister: d.Lister(), rsLister: rs.Lister()}
	dc.w = newWorker("deployment", c.cfg.Logger, dc.sync, d.Informer().HasSynced, rs.Informer().HasSynced)
	d.Informer().AddEventHandler(handler(func(obj any) []string {
		return []string{cache.MetaObjectToName(obj.(metav1.Object)).String()}
	}, dc.w.enqueue))
	rs.Informer().AddEventHandler(handler(ownerKey("Deployment"), dc.w.enqueue))
	return dc
}

func (dc *deploymentController) run(ctx context.Context) { dc.w.run(ctx) }

// ownerKey maps an object to the key of its controlling owner of kind.
func ownerKey(kind string) func(obj any) []string {
	return func(obj any) []string {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil
		}
		ref := metav1.GetControllerOf(m)
		if ref == nil || ref.Kind != kind {
			return nil
		}
		return []string{m.GetNamespace() + "/" + ref.Name}
	}
}

// TemplateHash returns the pod-template-hash of a pod template: a stable,
// DNS-label-safe hash of its content, as the deployment controller computes.
func TemplateHash(t *corev1.PodTemplateSpec, collisions *int32) string {
	h := fnv.New32a()
	b, _ := json.Marshal(t)
	h.Write(b)
	if collisions != nil {
		fmt.Fprintf(h, "%d", *collisions)
	}
	return utilrand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

func (dc *deploymentController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	d, err := dc.dLister.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	owned, err := dc.ownedReplicaSets(d)
	if err != nil {
		return err
	}
	hash := TemplateHash(&d.Spec.Template, d.Status.CollisionCount)
	var current *appsv1.ReplicaSet
	for _, rs := range owned {
		if rs.Labels[PodTemplateHashLabel] == hash {
			current = rs
		}
	}
	if current == nil {
		if current, err = dc.createReplicaSet(ctx, d, hash); err != nil {
			return err
		}
		owned = append(owned, current)
	}
	for _, rs := range owned {
		want := int32(0)
		if rs.Name == current.Name {
			want = *d.Spec.Replicas
		}
		if err := dc.scale(ctx, rs, want); err != nil {
			return err
		}
	}
	return dc.updateStatus(ctx, d, owned, current)
}

func (dc *deploymentController) ownedReplicaSets(d *appsv1.Deployment) ([]*appsv1.ReplicaSet, error) {
	all, err := dc.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var owned []*appsv1.ReplicaSet
	for _, rs := range all {
		if ref := metav1.GetControllerOf(rs); ref != nil && ref.UID == d.UID {
			owned = append(owned, rs)
		}
	}
	return owned, nil
}

func (dc *deploymentController) createReplicaSet(ctx context.Context, d *appsv1.Deployment, hash string) (*appsv1.ReplicaSet, error) {
	tmpl := *d.Spec.Template.DeepCopy()
	tmpl.Labels = withLabel(tmpl.Labels, PodTemplateHashLabel, hash)
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels = withLabel(sel.MatchLabels, PodTemplateHashLabel, hash)
	replicas := int32(0)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			Labels:          tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: sel, Template: tmpl, MinReadySeconds: d.Spec.MinReadySeconds},
	}
	created, err := dc.c.client.AppsV1().ReplicaSets(d.Namespace).Create(ctx, rs, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return dc.c.client.AppsV1().ReplicaSets(d.Namespace).Get(ctx, rs.Name, metav1.GetOptions{})
	}
	return created, err
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

func (dc *deploymentController) scale(ctx context.Context, rs *appsv1.ReplicaSet, want int32) error {
	if rs.Spec.Replicas != nil && *rs.Spec.Replicas == want {
		return nil
	}
	rs = rs.DeepCopy()
	rs.Spec.Replicas = &want
	_, err := dc.c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, rs, metav1.UpdateOptions{})
	return err
}

func (dc *deploymentController) updateStatus(ctx context.Context, d *appsv1.Deployment, owned []*appsv1.ReplicaSet, current *appsv1.ReplicaSet) error {
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, CollisionCount: d.Status.CollisionCount}
	for _, rs := range owned {
		st.Replicas += rs.Status.Replicas
		st.ReadyReplicas += rs.Status.ReadyReplicas
		st.AvailableReplicas += rs.Status.AvailableReplicas
		if rs.Name == current.Name {
			st.UpdatedReplicas = rs.Status.Replicas
		}
	}
	st.UnavailableReplicas = max(*d.Spec.Replicas-st.AvailableReplicas, 0)
	st.Conditions = d.Status.Conditions
	if equality.Semantic.DeepEqual(st, d.Status) {
		return nil
	}
	d = d.DeepCopy()
	d.Status = st
	_, err := dc.c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	return err
}
