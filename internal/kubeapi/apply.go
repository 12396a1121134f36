package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// Apply applies objects as kubectl apply does, whatever their order:
// Namespaces first, then Services, EndpointSlices and the rest, so that
// each object's namespace exists (the API server refuses objects in a
// missing one; an EndpointSlice needs no Service). An object without a
// namespace goes to default. An object that exists already, such as the
// kube-system Namespace or a cluster's kube-dns Service, is patched with
// what the given one changes: the three-way strategic merge patch kubectl
// apply computes for an object it did not create (no last-applied
// configuration, so nothing is removed). It takes Namespaces, Services,
// Deployments, StatefulSets and EndpointSlices (typed, as client-go's
// scheme decodes them). The first failure stops it; the error is the
// API's, so callers can read its field causes. It returns once the
// informer caches hold every object, so that a wait that follows sees
// them, or with ctx's error.
func (c Client) Apply(ctx context.Context, objs []runtime.Object) error {
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
		if err := c.apply(ctx, o); err != nil {
			return err
		}
	}
	return c.waitCached(ctx, ordered)
}

// apply creates o, or patches it if it exists.
func (c Client) apply(ctx context.Context, o runtime.Object) error {
	m, err := meta.Accessor(o)
	if err != nil {
		return err
	}
	api, err := c.resource(o, namespace(m))
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
// differently, after the API server's defaults (cluster.Default, so that a
// field the API server filled in, such as a targetPort, is no change).
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

// resource returns the API for o, in namespace ns (unused for a
// Namespace).
func (c Client) resource(o runtime.Object, ns string) (resourceAPI, error) {
	cs := c.Clientset
	switch obj := o.(type) {
	case *corev1.Namespace:
		return typedAPI(obj, cs.CoreV1().Namespaces()), nil
	case *corev1.Service:
		return typedAPI(obj, cs.CoreV1().Services(ns)), nil
	case *appsv1.Deployment:
		return typedAPI(obj, cs.AppsV1().Deployments(ns)), nil
	case *appsv1.StatefulSet:
		return typedAPI(obj, cs.AppsV1().StatefulSets(ns)), nil
	case *discoveryv1.EndpointSlice:
		return typedAPI(obj, cs.DiscoveryV1().EndpointSlices(ns)), nil
	}
	return resourceAPI{}, fmt.Errorf("kubeapi: cannot apply %T", o)
}

// typedClient is what client-go's typed clients have in common.
type typedClient[T runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

func typedAPI[T runtime.Object](obj T, c typedClient[T]) resourceAPI {
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

// waitCached waits until the informer caches hold every object, so that
// components and waits that read the caches see what was just written.
func (c Client) waitCached(ctx context.Context, objs []runtime.Object) error {
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, o := range objs {
			m, err := meta.Accessor(o)
			if err != nil {
				return false, err
			}
			store, key := c.store(o), m.GetName()
			if store == nil {
				continue
			}
			if _, isNS := o.(*corev1.Namespace); !isNS {
				key = namespace(m) + "/" + key
			}
			if _, ok, _ := store.GetByKey(key); !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

// store is the informer cache of o's kind, nil for a kind Apply refuses.
func (c Client) store(o runtime.Object) cache.Store {
	f := c.Factory
	switch o.(type) {
	case *corev1.Namespace:
		return f.Core().V1().Namespaces().Informer().GetStore()
	case *corev1.Service:
		return f.Core().V1().Services().Informer().GetStore()
	case *appsv1.Deployment:
		return f.Apps().V1().Deployments().Informer().GetStore()
	case *appsv1.StatefulSet:
		return f.Apps().V1().StatefulSets().Informer().GetStore()
	case *discoveryv1.EndpointSlice:
		return f.Discovery().V1().EndpointSlices().Informer().GetStore()
	}
	return nil
}
