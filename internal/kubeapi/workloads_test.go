package kubeapi

import (
	"context"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestChanges: Scale and UpdateTemplate write the workload and return once
// the informer cache holds what they wrote; RolloutRestart sets kubectl's
// annotation; DeletePod deletes gracefully unless told a grace period;
// each refuses what it cannot change with the API's error or its own.
func TestChanges(t *testing.T) {
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "pinlab"}}}}
	tests := []struct {
		name string
		do   func(context.Context, Client) error
		// check reads the result; k's caches for Scale and UpdateTemplate,
		// c's API for the others.
		check   func(t *testing.T, ctx context.Context, k Client, c *cluster.Cluster)
		wantErr func(error) bool // nil: do must succeed
	}{
		{name: "Scale a Deployment",
			do: func(ctx context.Context, k Client) error { return k.Scale(ctx, "Deployment", "shop", "web", 3) },
			check: func(t *testing.T, _ context.Context, k Client, _ *cluster.Cluster) {
				d, err := k.Factory.Apps().V1().Deployments().Lister().Deployments("shop").Get("web")
				if err != nil || *d.Spec.Replicas != 3 || d.Generation != 2 {
					t.Errorf("cached Deployment: %v; want 3 replicas at generation 2", err)
				}
			}},
		{name: "Scale a StatefulSet",
			do: func(ctx context.Context, k Client) error { return k.Scale(ctx, "StatefulSet", "shop", "db", 0) },
			check: func(t *testing.T, _ context.Context, k Client, _ *cluster.Cluster) {
				s, err := k.Factory.Apps().V1().StatefulSets().Lister().StatefulSets("shop").Get("db")
				if err != nil || *s.Spec.Replicas != 0 || s.Generation != 2 {
					t.Errorf("cached StatefulSet: %v; want 0 replicas at generation 2", err)
				}
			}},
		{name: "UpdateTemplate of a Deployment",
			do: func(ctx context.Context, k Client) error {
				return k.UpdateTemplate(ctx, "Deployment", "shop", "web", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Image = "pinlab:2" })
			},
			check: func(t *testing.T, _ context.Context, k Client, _ *cluster.Cluster) {
				d, err := k.Factory.Apps().V1().Deployments().Lister().Deployments("shop").Get("web")
				if err != nil || d.Spec.Template.Spec.Containers[0].Image != "pinlab:2" || *d.Spec.Replicas != 2 {
					t.Errorf("cached Deployment: %v; want image pinlab:2 and replicas 2 as they were", err)
				}
			}},
		{name: "Scale what is neither",
			do: func(ctx context.Context, k Client) error { return k.Scale(ctx, "ReplicaSet", "shop", "web", 1) },
			wantErr: func(err error) bool {
				return err != nil && err.Error() == "kubeapi: cannot change a ReplicaSet; expected Deployment or StatefulSet"
			}},
		{name: "UpdateTemplate of a missing workload",
			do: func(ctx context.Context, k Client) error {
				return k.UpdateTemplate(ctx, "StatefulSet", "shop", "nothing", func(*corev1.PodTemplateSpec) {})
			},
			wantErr: apierrors.IsNotFound},
		{name: "RolloutRestart",
			do: func(ctx context.Context, k Client) error { return k.RolloutRestart(ctx, "deploy", "shop", "web") },
			check: func(t *testing.T, ctx context.Context, _ Client, c *cluster.Cluster) {
				d, err := c.Client().AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
				if err != nil || d.Spec.Template.Annotations[cluster.RestartedAtAnnotation] == "" {
					t.Errorf("Deployment after the restart: %v; want the %s annotation", err, cluster.RestartedAtAnnotation)
				}
			}},
		{name: "RolloutRestart of a missing workload",
			do:      func(ctx context.Context, k Client) error { return k.RolloutRestart(ctx, "sts", "shop", "nothing") },
			wantErr: apierrors.IsNotFound},
		{name: "DeletePod keeps the pod's grace period",
			do: func(ctx context.Context, k Client) error { return k.DeletePod(ctx, "shop", "web-1", nil) },
			check: func(t *testing.T, ctx context.Context, _ Client, c *cluster.Cluster) {
				p, err := c.Client().CoreV1().Pods("shop").Get(ctx, "web-1", metav1.GetOptions{})
				if err != nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != corev1.DefaultTerminationGracePeriodSeconds {
					t.Errorf("pod after the delete: %v; want it terminating with the default grace period", err)
				}
			}},
		{name: "DeletePod with no grace",
			do: func(ctx context.Context, k Client) error { return k.DeletePod(ctx, "shop", "web-1", new(int64(0))) },
			check: func(t *testing.T, ctx context.Context, _ Client, c *cluster.Cluster) {
				if _, err := c.Client().CoreV1().Pods("shop").Get(ctx, "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("pod after the delete: %v; want it gone", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, c := embedded(t)
			ctx := labtest.Context(t, 10*time.Second)
			if err := k.Apply(ctx, []runtime.Object{nsObj("shop", nil), deployment("shop", "web", 2), statefulSet("shop", "db", 1)}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Client().CoreV1().Pods("shop").Create(ctx, web, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			err := tt.do(ctx, k)
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("%v; want another error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, ctx, k, c)
		})
	}
}
