package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// waitCached waits until the informer caches hold every object, so that
// components and waits that read the caches see what was just written.
func (l *Lab) waitCached(ctx context.Context, objs []runtime.Object) error {
	f := l.Cluster.Factory()
	stores := map[string]cache.Store{
		"Namespace":     f.Core().V1().Namespaces().Informer().GetStore(),
		"Service":       f.Core().V1().Services().Informer().GetStore(),
		"Deployment":    f.Apps().V1().Deployments().Informer().GetStore(),
		"StatefulSet":   f.Apps().V1().StatefulSets().Informer().GetStore(),
		"EndpointSlice": f.Discovery().V1().EndpointSlices().Informer().GetStore(),
	}
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, o := range objs {
			m, err := meta.Accessor(o)
			if err != nil {
				return false, err
			}
			key := m.GetName()
			if _, isNS := o.(*corev1.Namespace); !isNS {
				key = ns(m) + "/" + key
			}
			store := stores[fmt.Sprintf("%T", o)[strings.LastIndexByte(fmt.Sprintf("%T", o), '.')+1:]]
			if store == nil {
				continue
			}
			if _, ok, _ := store.GetByKey(key); !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

func ns(o metav1.Object) string {
	if o.GetNamespace() == "" {
		return metav1.NamespaceDefault
	}
	return o.GetNamespace()
}

// Scale sets the spec.replicas of a Deployment or StatefulSet (kind).
func (l *Lab) Scale(ctx context.Context, kind, namespace, name string, replicas int32) error {
	return l.editWorkload(ctx, kind, namespace, name, func(r **int32, _ *corev1.PodTemplateSpec) { *r = &replicas })
}

// UpdateTemplate changes the pod template of a Deployment or StatefulSet
// (kind) with edit, as kubectl set image or edit would; the workload's
// update strategy then rolls the change out.
func (l *Lab) UpdateTemplate(ctx context.Context, kind, namespace, name string, edit func(*corev1.PodTemplateSpec)) error {
	return l.editWorkload(ctx, kind, namespace, name, func(_ **int32, t *corev1.PodTemplateSpec) { edit(t) })
}

// editWorkload reads a Deployment or StatefulSet, lets edit change its
// spec.replicas and pod template, writes it back, and returns once the
// lab's informer cache holds the written generation, so that a WaitReady
// that follows judges the new spec and not the one before it (the cache
// lags the API by a watch event; with the real API server that lag let
// WaitReady return while a scale-out had no new pod yet).
func (l *Lab) editWorkload(ctx context.Context, kind, namespace, name string, edit func(replicas **int32, t *corev1.PodTemplateSpec)) error {
	apps := l.Cluster.Client().AppsV1()
	f := l.Cluster.Factory().Apps().V1()
	var written int64
	var cached func() (metav1.Object, error)
	switch kind {
	case "Deployment":
		d, err := apps.Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&d.Spec.Replicas, &d.Spec.Template)
		if d, err = apps.Deployments(namespace).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return err
		}
		written = d.Generation
		cached = func() (metav1.Object, error) { return f.Deployments().Lister().Deployments(namespace).Get(name) }
	case "StatefulSet":
		s, err := apps.StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(&s.Spec.Replicas, &s.Spec.Template)
		if s, err = apps.StatefulSets(namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
		written = s.Generation
		cached = func() (metav1.Object, error) { return f.StatefulSets().Lister().StatefulSets(namespace).Get(name) }
	default:
		return fmt.Errorf("lab: cannot change a %s; expected Deployment or StatefulSet", kind)
	}
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		o, err := cached()
		return err == nil && o.GetGeneration() >= written, nil
	})
}
