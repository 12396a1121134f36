package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/pinlab/pinlab/internal/cluster"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// Apply applies objects as kubectl apply does, whatever their order:
// Namespaces first, then Services, EndpointSlices and the rest, so that
// each object's namespace exists (the API server refuses objects in a
// missing one; an EndpointSlice needs no Service). An object that exists
// already, such as the kube-system Namespace or the kube-dns Service every
// lab creates, is patched with what the given one changes: the three-way
// strategic merge patch kubectl apply computes for an object it did not
// create (no last-applied configuration, so nothing is removed). The
// first failure stops it; the error is the API's, so callers can read its
// field causes.
func (l *Lab) Apply(ctx context.Context, objs []runtime.Object) error {
	ordered := append([]runtime.Object(nil), objs...)
	rank := func(o runtime.Object) int {
		switch o.(type) {
		case *corev1.Namespace:
			return 0
		case *corev1.Service:
			return 1
		case *discoveryv1.EndpointSlice:
			return 2
		}
		return 3
	}
	sort.SliceStable(ordered, func(i, j int) bool { return rank(ordered[i]) < rank(ordered[j]) })
	for _, o := range ordered {
		if err := l.apply(ctx, o); err != nil {
			return err
		}
	}
	return l.waitCached(ctx, ordered)
}

// apply creates o, or patches it if it exists.
func (l *Lab) apply(ctx context.Context, o runtime.Object) error {
	m, err := meta.Accessor(o)
	if err != nil {
		return err
	}
	api, err := l.resource(o, ns(m))
	if err != nil {
		return err
	}
	err = api.create(ctx)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	current, err := api.get(ctx, m.GetName())
	if err != nil {
		return err
	}
	patch, err := threeWayPatch(o, current)
	if err != nil || string(patch) == "{}" {
		return err
	}
	return api.patch(ctx, m.GetName(), patch)
}

// threeWayPatch is the patch kubectl apply sends to turn current into
// modified when it has no last-applied configuration: what modified sets
// differently, after the API server's defaults (so that a field the API
// server filled in, such as a targetPort, is no change).
func threeWayPatch(modified, current runtime.Object) ([]byte, error) {
	modified = modified.DeepCopyObject()
	cluster.Default(modified)
	mod, err := specJSON(modified)
	if err != nil {
		return nil, err
	}
	cur, err := specJSON(current)
	if err != nil {
		return nil, err
	}
	schema, err := strategicpatch.NewPatchMetaFromStruct(modified)
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateThreeWayMergePatch(nil, mod, cur, schema, true)
}

// specJSON is o's JSON without status and the metadata the API server
// owns.
func specJSON(o runtime.Object) ([]byte, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		for _, f := range []string{"creationTimestamp", "uid", "resourceVersion", "generation", "managedFields"} {
			delete(md, f)
		}
	}
	return json.Marshal(u)
}

// resourceAPI is the part of the API that apply uses, for one object.
type resourceAPI struct {
	create func(context.Context) error
	get    func(ctx context.Context, name string) (runtime.Object, error)
	patch  func(ctx context.Context, name string, data []byte) error
}

// resource returns the API for o, in namespace namespace (unused for a
// Namespace).
func (l *Lab) resource(o runtime.Object, namespace string) (resourceAPI, error) {
	cs := l.Cluster.Client()
	switch obj := o.(type) {
	case *corev1.Namespace:
		return api(obj, cs.CoreV1().Namespaces()), nil
	case *corev1.Service:
		return api(obj, cs.CoreV1().Services(namespace)), nil
	case *appsv1.Deployment:
		return api(obj, cs.AppsV1().Deployments(namespace)), nil
	case *appsv1.StatefulSet:
		return api(obj, cs.AppsV1().StatefulSets(namespace)), nil
	case *discoveryv1.EndpointSlice:
		return api(obj, cs.DiscoveryV1().EndpointSlices(namespace)), nil
	}
	return resourceAPI{}, fmt.Errorf("lab: cannot apply %T", o)
}

// typedClient is what client-go's typed clients have in common.
type typedClient[T runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

func api[T runtime.Object](obj T, c typedClient[T]) resourceAPI {
	return resourceAPI{
		create: func(ctx context.Context) error {
			_, err := c.Create(ctx, obj, metav1.CreateOptions{})
			return err
		},
		get: func(ctx context.Context, name string) (runtime.Object, error) {
			return c.Get(ctx, name, metav1.GetOptions{})
		},
		patch: func(ctx context.Context, name string, data []byte) error {
			_, err := c.Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
			return err
		},
	}
}
