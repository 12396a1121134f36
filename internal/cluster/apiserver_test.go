package cluster

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// newAPI returns a cluster without controllers: only the API reactors.
func newAPI(t *testing.T) *Cluster {
	t.Helper()
	c, err := New(Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	return c
}

func TestGeneration(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		write   func(api *Cluster, d *appsv1.Deployment) error
		wantGen int64
	}{
		{name: "spec update", wantGen: 2, write: func(c *Cluster, d *appsv1.Deployment) error {
			d.Spec.Template.Spec.Containers[0].Image = "v2"
			_, err := c.Client().AppsV1().Deployments("shop").Update(ctx, d, metav1.UpdateOptions{})
			return err
		}},
		{name: "metadata update", wantGen: 1, write: func(c *Cluster, d *appsv1.Deployment) error {
			d.Labels = map[string]string{"team": "x"}
			_, err := c.Client().AppsV1().Deployments("shop").Update(ctx, d, metav1.UpdateOptions{})
			return err
		}},
		{name: "update leaving defaults out", wantGen: 1, write: func(c *Cluster, d *appsv1.Deployment) error {
			d.Spec.Strategy = appsv1.DeploymentStrategy{}
			d.Spec.RevisionHistoryLimit = nil
			_, err := c.Client().AppsV1().Deployments("shop").Update(ctx, d, metav1.UpdateOptions{})
			return err
		}},
		{name: "status update", wantGen: 1, write: func(c *Cluster, d *appsv1.Deployment) error {
			d.Status.Replicas = 7
			d.Spec.Template.Spec.Containers[0].Image = "ignored"
			_, err := c.Client().AppsV1().Deployments("shop").UpdateStatus(ctx, d, metav1.UpdateOptions{})
			return err
		}},
		{name: "merge patch of spec", wantGen: 2, write: func(c *Cluster, d *appsv1.Deployment) error {
			_, err := c.Client().AppsV1().Deployments("shop").Patch(ctx, d.Name, types.MergePatchType,
				[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
			return err
		}},
		{name: "strategic merge patch of the template", wantGen: 2, write: func(c *Cluster, d *appsv1.Deployment) error {
			_, err := c.Client().AppsV1().Deployments("shop").Patch(ctx, d.Name, types.StrategicMergePatchType,
				[]byte(`{"spec":{"template":{"metadata":{"annotations":{"a":"b"}}}}}`), metav1.PatchOptions{})
			return err
		}},
		{name: "JSON patch of metadata", wantGen: 1, write: func(c *Cluster, d *appsv1.Deployment) error {
			_, err := c.Client().AppsV1().Deployments("shop").Patch(ctx, d.Name, types.JSONPatchType,
				[]byte(`[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`), metav1.PatchOptions{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newAPI(t)
			d, err := c.Client().AppsV1().Deployments("shop").Create(ctx, deployment("web", 1), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.write(c, d.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			got, err := c.Client().AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Generation != tt.wantGen {
				t.Errorf("generation %d, want %d", got.Generation, tt.wantGen)
			}
			if got.UID != d.UID {
				t.Errorf("uid changed from %s to %s", d.UID, got.UID)
			}
		})
	}
}

func TestPatchErrors(t *testing.T) {
	ctx := context.Background()
	c := newAPI(t)
	if _, err := c.Client().AppsV1().Deployments("shop").Create(ctx, deployment("web", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		pt    types.PatchType
		patch string
		check func(error) bool
	}{
		{name: "malformed merge patch", pt: types.MergePatchType, patch: `{`, check: apierrors.IsBadRequest},
		{name: "invalid result", pt: types.MergePatchType, patch: `{"spec":{"replicas":-1}}`, check: apierrors.IsInvalid},
		{name: "JSON patch of a missing path", pt: types.JSONPatchType, patch: `[{"op":"replace","path":"/nope/x","value":1}]`, check: apierrors.IsBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Client().AppsV1().Deployments("shop").Patch(ctx, "web", tt.pt, []byte(tt.patch), metav1.PatchOptions{})
			if err == nil || !tt.check(err) {
				t.Errorf("patch error %v", err)
			}
		})
	}
	if _, err := c.Client().AppsV1().Deployments("shop").Patch(ctx, "nope", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("patch of a missing object: %v, want NotFound", err)
	}
}

func TestStrategyValidation(t *testing.T) {
	ctx := context.Background()
	c := newAPI(t)
	rolling := func(surge, unav intstr.IntOrString) func(*appsv1.Deployment) {
		return func(d *appsv1.Deployment) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unav}}
		}
	}
	deployments := []struct {
		name   string
		change func(*appsv1.Deployment)
		ok     bool
	}{
		{name: "surge 200%", change: rolling(intstr.FromString("200%"), intstr.FromInt32(0)), ok: true},
		{name: "both 0", change: rolling(intstr.FromInt32(0), intstr.FromString("0%"))},
		{name: "unavailable 101%", change: rolling(intstr.FromInt32(1), intstr.FromString("101%"))},
		{name: "malformed percent", change: rolling(intstr.FromString("25"), intstr.FromInt32(1))},
		{name: "negative surge", change: rolling(intstr.FromInt32(-1), intstr.FromInt32(1))},
		{name: "Recreate with rollingUpdate", change: func(d *appsv1.Deployment) {
			rolling(intstr.FromInt32(1), intstr.FromInt32(1))(d)
			d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		}},
		{name: "unknown strategy", change: func(d *appsv1.Deployment) { d.Spec.Strategy.Type = "BlueGreen" }},
		{name: "deadline not above minReadySeconds", change: func(d *appsv1.Deployment) {
			five := int32(5)
			d.Spec.MinReadySeconds, d.Spec.ProgressDeadlineSeconds = 5, &five
		}},
	}
	for i, tt := range deployments {
		t.Run("Deployment "+tt.name, func(t *testing.T) {
			d := deployment("d"+string(rune('a'+i)), 1)
			tt.change(d)
			_, err := c.Client().AppsV1().Deployments("shop").Create(ctx, d, metav1.CreateOptions{})
			if tt.ok != (err == nil) || (err != nil && !apierrors.IsInvalid(err)) {
				t.Errorf("create: %v; want ok = %v or an Invalid error", err, tt.ok)
			}
		})
	}
	partition := func(p int32) *int32 { return &p }
	sets := []struct {
		name   string
		change func(*appsv1.StatefulSet)
		ok     bool
	}{
		{name: "maxUnavailable 50%", ok: true, change: func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: ptrIntStr(intstr.FromString("50%"))}
		}},
		{name: "negative partition", change: func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: partition(-1)}
		}},
		{name: "maxUnavailable 0", change: func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: ptrIntStr(intstr.FromInt32(0))}
		}},
		{name: "OnDelete with rollingUpdate", change: func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: partition(0)}}
		}},
		{name: "unknown strategy", change: func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.Type = "Canary" }},
	}
	for i, tt := range sets {
		t.Run("StatefulSet "+tt.name, func(t *testing.T) {
			s := statefulSet("s"+string(rune('a'+i)), 1)
			tt.change(s)
			_, err := c.Client().AppsV1().StatefulSets("shop").Create(ctx, s, metav1.CreateOptions{})
			if tt.ok != (err == nil) || (err != nil && !apierrors.IsInvalid(err)) {
				t.Errorf("create: %v; want ok = %v or an Invalid error", err, tt.ok)
			}
		})
	}
}
