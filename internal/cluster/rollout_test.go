package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
)

func getDeployment(t *testing.T, c *Cluster, name string) *appsv1.Deployment {
	t.Helper()
	d, err := c.Client().AppsV1().Deployments("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// updateDeployment applies change to the stored Deployment.
func updateDeployment(t *testing.T, c *Cluster, name string, change func(*appsv1.Deployment)) {
	t.Helper()
	d := getDeployment(t, c, name)
	change(d)
	if _, err := c.Client().AppsV1().Deployments("shop").Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setImage(image string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = image }
}

func replicaSetsOf(t *testing.T, c *Cluster, name string) []appsv1.ReplicaSet {
	t.Helper()
	l, err := c.Client().AppsV1().ReplicaSets("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ReplicaSet
	for _, rs := range l.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.Name == name {
			out = append(out, rs)
		}
	}
	sort.Slice(out, func(i, j int) bool { return revisionOf(&out[i]) < revisionOf(&out[j]) })
	return out
}

// settled reports whether the Deployment's pods are exactly replicas
// running pods of its current template, none terminating.
func settled(t *testing.T, c *Cluster, name string) (bool, string) {
	d := getDeployment(t, c, name)
	rss := replicaSetsOf(t, c, name)
	if len(rss) == 0 {
		return false, "no ReplicaSet"
	}
	newest := rss[len(rss)-1].Labels[PodTemplateHashLabel]
	var n int
	for _, p := range listPods(t, c) {
		if p.Labels["app"] != name {
			continue
		}
		if p.DeletionTimestamp != nil || p.Labels[PodTemplateHashLabel] != newest || p.Status.Phase != corev1.PodRunning {
			return false, fmt.Sprintf("pod %s: hash %s, phase %s, terminating %v", p.Name, p.Labels[PodTemplateHashLabel], p.Status.Phase, p.DeletionTimestamp != nil)
		}
		n++
	}
	return n == int(*d.Spec.Replicas), fmt.Sprintf("%d pods", n)
}

func ptrIntStr(v intstr.IntOrString) *intstr.IntOrString { return &v }

func TestDeploymentRollingUpdate(t *testing.T) {
	tests := []struct {
		name         string
		surge, unav  intstr.IntOrString
		maxPods      int // replicas + maxSurge
		minAvailable int // replicas - maxUnavailable
	}{
		{name: "25% and 25% of 4", surge: intstr.FromString("25%"), unav: intstr.FromString("25%"), maxPods: 5, minAvailable: 3},
		{name: "surge 1, unavailable 0", surge: intstr.FromInt32(1), unav: intstr.FromInt32(0), maxPods: 5, minAvailable: 4},
		{name: "surge 0, unavailable 1", surge: intstr.FromInt32(0), unav: intstr.FromInt32(1), maxPods: 4, minAvailable: 3},
		{name: "surge 100%, unavailable 0", surge: intstr.FromString("100%"), unav: intstr.FromInt32(0), maxPods: 8, minAvailable: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startCluster(t)
			kubelet{linger: 5 * time.Millisecond}.start(t, c)
			d := deployment("web", 4)
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptrIntStr(tt.surge), MaxUnavailable: ptrIntStr(tt.unav)}}
			mustCreate(t, c, d)
			waitRollout(t, c, KindDeployment, "web")
			eventually(t, "4 settled pods", func() (bool, string) { return settled(t, c, "web") })

			// "Pods" are the non-terminating ones, as the controller counts
			// them; terminating pods are neither counted nor available.
			var maxSeen, minSeen = 0, 1 << 30
			w := watchPods(t, c, func(pods map[string]*corev1.Pod, _ watch.Event) string {
				var active, available int
				for _, p := range pods {
					if p.DeletionTimestamp == nil {
						active++
						if IsPodAvailable(p, 0, time.Now()) {
							available++
						}
					}
				}
				maxSeen, minSeen = max(maxSeen, active), min(minSeen, available)
				if active > tt.maxPods || available < tt.minAvailable {
					return fmt.Sprintf("%d pods, %d available; want at most %d and at least %d", active, available, tt.maxPods, tt.minAvailable)
				}
				return ""
			})
			updateDeployment(t, c, "web", setImage("pinlab:v2"))
			waitRollout(t, c, KindDeployment, "web")
			eventually(t, "4 settled new pods", func() (bool, string) { return settled(t, c, "web") })
			events, failure := w.result()
			if failure != "" {
				t.Fatalf("during the rollout: %s", failure)
			}
			t.Logf("%d pod events; at most %d pods, at least %d available", events, maxSeen, minSeen)
			if events < 8 {
				t.Errorf("saw %d pod events, want at least 8 (4 creations, 4 deletions)", events)
			}

			got := getDeployment(t, c, "web")
			st := got.Status
			if st.ObservedGeneration != got.Generation || got.Generation != 2 {
				t.Errorf("generation %d, observedGeneration %d; want 2 and 2", got.Generation, st.ObservedGeneration)
			}
			counts := []int32{st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, st.UnavailableReplicas}
			if diff := cmp.Diff([]int32{4, 4, 4, 4, 0}, counts); diff != "" {
				t.Errorf("replicas, updated, ready, available, unavailable (-want +got):\n%s", diff)
			}
			reasons := map[appsv1.DeploymentConditionType]string{}
			for _, c := range st.Conditions {
				reasons[c.Type] = string(c.Status) + "/" + c.Reason
			}
			want := map[appsv1.DeploymentConditionType]string{
				appsv1.DeploymentAvailable:   "True/" + ReasonMinimumReplicas,
				appsv1.DeploymentProgressing: "True/" + ReasonNewReplicaSetAvailable,
			}
			if diff := cmp.Diff(want, reasons); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			rss := replicaSetsOf(t, c, "web")
			if len(rss) != 2 || specReplicas(&rss[0]) != 0 || specReplicas(&rss[1]) != 4 || rss[1].Annotations[RevisionAnnotation] != "2" {
				t.Errorf("ReplicaSets: want the old at 0 and the new (revision 2) at 4, got %s", describeRS(rss))
			}
			if got.Annotations[RevisionAnnotation] != "2" {
				t.Errorf("deployment revision %q, want 2", got.Annotations[RevisionAnnotation])
			}
		})
	}
}

func describeRS(rss []appsv1.ReplicaSet) string {
	var out []string
	for _, rs := range rss {
		out = append(out, fmt.Sprintf("%s rev %s at %d", rs.Name, rs.Annotations[RevisionAnnotation], specReplicas(&rs)))
	}
	return fmt.Sprint(out)
}

func TestDeploymentMinReadySeconds(t *testing.T) {
	c := startCluster(t)
	kubelet{}.start(t, c)
	d := deployment("slow", 2)
	d.Spec.MinReadySeconds = 1
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptrIntStr(intstr.FromInt32(1)), MaxUnavailable: ptrIntStr(intstr.FromInt32(0))}}
	mustCreate(t, c, d)
	waitRollout(t, c, KindDeployment, "slow")
	eventually(t, "2 settled pods", func() (bool, string) { return settled(t, c, "slow") })
	oldHash := listPods(t, c)[0].Labels[PodTemplateHashLabel]

	// The first old pod may go only once a new pod was Ready for
	// minReadySeconds; the stored lastTransitionTime is what the controllers
	// go by.
	var firstReady, firstDeletion time.Time
	w := watchPods(t, c, func(pods map[string]*corev1.Pod, ev watch.Event) string {
		p := ev.Object.(*corev1.Pod)
		switch {
		case p.Labels[PodTemplateHashLabel] != oldHash && IsPodReady(p) && firstReady.IsZero():
			firstReady = readySince(p)
		case p.Labels[PodTemplateHashLabel] == oldHash && p.DeletionTimestamp != nil && firstDeletion.IsZero():
			firstDeletion = deletionStart(p)
			if firstReady.IsZero() {
				return "an old pod was deleted before any new pod was ready"
			}
		}
		return ""
	})
	updateDeployment(t, c, "slow", setImage("pinlab:v2"))
	waitRollout(t, c, KindDeployment, "slow")
	if _, failure := w.result(); failure != "" {
		t.Fatal(failure)
	}
	if gap := firstDeletion.Sub(firstReady); gap < time.Second {
		t.Errorf("first old pod deleted %v after the first new pod became ready, want at least minReadySeconds (1s)", gap)
	}
}

func TestDeploymentRecreate(t *testing.T) {
	c := startCluster(t)
	kubelet{linger: 20 * time.Millisecond}.start(t, c)
	d := deployment("batch", 3)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	mustCreate(t, c, d)
	waitRollout(t, c, KindDeployment, "batch")
	eventually(t, "3 settled pods", func() (bool, string) { return settled(t, c, "batch") })

	w := watchPods(t, c, func(pods map[string]*corev1.Pod, _ watch.Event) string {
		hashes := map[string]bool{}
		for _, p := range pods {
			hashes[p.Labels[PodTemplateHashLabel]] = true
		}
		if len(hashes) > 1 {
			return fmt.Sprintf("pods of %d templates at once: %v", len(hashes), hashes)
		}
		return ""
	})
	updateDeployment(t, c, "batch", setImage("pinlab:v2"))
	waitRollout(t, c, KindDeployment, "batch")
	eventually(t, "3 settled new pods", func() (bool, string) { return settled(t, c, "batch") })
	if events, failure := w.result(); failure != "" || events < 6 {
		t.Fatalf("%d events; failure: %q", events, failure)
	}
}

func TestRolloutRestart(t *testing.T) {
	c := startCluster(t)
	kubelet{}.start(t, c)
	mustCreate(t, c, deployment("web", 2))
	waitRollout(t, c, KindDeployment, "web")
	before := getDeployment(t, c, "web")

	if err := c.RolloutRestart(context.Background(), "deploy", "shop", "web"); err != nil {
		t.Fatal(err)
	}
	after := getDeployment(t, c, "web")
	if after.Generation != before.Generation+1 {
		t.Errorf("generation %d after restart, want %d", after.Generation, before.Generation+1)
	}
	at, err := time.Parse(time.RFC3339, after.Spec.Template.Annotations[RestartedAtAnnotation])
	if err != nil || time.Since(at) > time.Minute {
		t.Errorf("restartedAt %q: %v", after.Spec.Template.Annotations[RestartedAtAnnotation], err)
	}
	waitRollout(t, c, KindDeployment, "web")
	eventually(t, "2 settled new pods", func() (bool, string) { return settled(t, c, "web") })
	rss := replicaSetsOf(t, c, "web")
	if len(rss) != 2 || specReplicas(&rss[0]) != 0 || specReplicas(&rss[1]) != 2 {
		t.Fatalf("ReplicaSets: want a new one at 2 and the old at 0, got %s", describeRS(rss))
	}
	if _, ok := rss[1].Spec.Template.Annotations[RestartedAtAnnotation]; !ok {
		t.Errorf("new ReplicaSet's template lacks %s", RestartedAtAnnotation)
	}

	paused := deployment("paused", 1)
	paused.Spec.Paused = true
	mustCreate(t, c, paused)
	tests := []struct {
		name, kind, obj string
		notFound        bool
	}{
		{name: "unknown kind", kind: "DaemonSet", obj: "web"},
		{name: "missing deployment", kind: "Deployment", obj: "nope", notFound: true},
		{name: "missing statefulset", kind: "sts", obj: "nope", notFound: true},
		{name: "paused deployment", kind: "Deployment", obj: "paused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.RolloutRestart(context.Background(), tt.kind, "shop", tt.obj)
			if err == nil {
				t.Fatal("restart succeeded, want an error")
			}
			if apierrors.IsNotFound(err) != tt.notFound {
				t.Errorf("error %v: NotFound = %v, want %v", err, apierrors.IsNotFound(err), tt.notFound)
			}
		})
	}
}

// TestDeploymentProportionalScaling is the example of the Kubernetes
// documentation (Deployments, "Proportional scaling"): 10 replicas, maxSurge
// 3, maxUnavailable 2, a rollout stuck on pods that never become ready, then
// a scale to 15 spread 3 to the old and 2 to the new ReplicaSet.
func TestDeploymentProportionalScaling(t *testing.T) {
	c := startCluster(t)
	kubelet{ready: func(p *corev1.Pod) bool { return p.Spec.Containers[0].Image != "pinlab:bad" }}.start(t, c)
	d := deployment("web", 10)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptrIntStr(intstr.FromInt32(3)), MaxUnavailable: ptrIntStr(intstr.FromInt32(2))}}
	mustCreate(t, c, d)
	waitRollout(t, c, KindDeployment, "web")

	sizes := func() []int32 {
		var out []int32
		for _, rs := range replicaSetsOf(t, c, "web") {
			out = append(out, specReplicas(&rs))
		}
		return out
	}
	updateDeployment(t, c, "web", setImage("pinlab:bad"))
	eventually(t, "rollout stuck at old 8, new 5", func() (bool, string) {
		return cmp.Equal([]int32{8, 5}, sizes()), fmt.Sprint(sizes())
	})
	updateDeployment(t, c, "web", func(d *appsv1.Deployment) { n := int32(15); d.Spec.Replicas = &n })
	eventually(t, "old 11, new 7", func() (bool, string) {
		return cmp.Equal([]int32{11, 7}, sizes()), fmt.Sprint(sizes())
	})
	if done, err := c.RolloutComplete(context.Background(), KindDeployment, "shop", "web"); done || err != nil {
		t.Errorf("RolloutComplete = %v, %v; want false, nil", done, err)
	}
}

func TestDeploymentProgressDeadline(t *testing.T) {
	c := startCluster(t)
	kubelet{ready: func(*corev1.Pod) bool { return false }}.start(t, c)
	d := deployment("stuck", 1)
	one := int32(1)
	d.Spec.ProgressDeadlineSeconds = &one
	mustCreate(t, c, d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.WaitRollout(ctx, KindDeployment, "shop", "stuck")
	if !errors.Is(err, ErrProgressDeadline) {
		t.Fatalf("WaitRollout = %v, want ErrProgressDeadline", err)
	}
	cond := deploymentCondition(getDeployment(t, c, "stuck").Status, appsv1.DeploymentProgressing)
	if cond == nil || cond.Status != corev1.ConditionFalse {
		t.Errorf("Progressing condition %+v, want False", cond)
	}
}

func TestResolveFenceposts(t *testing.T) {
	tests := []struct {
		name        string
		surge, unav *intstr.IntOrString
		desired     int32
		want        [2]int32
		wantErr     bool
	}{
		{name: "25% of 4", surge: ptrIntStr(intstr.FromString("25%")), unav: ptrIntStr(intstr.FromString("25%")), desired: 4, want: [2]int32{1, 1}},
		{name: "surge rounds up, unavailable down", surge: ptrIntStr(intstr.FromString("25%")), unav: ptrIntStr(intstr.FromString("25%")), desired: 10, want: [2]int32{3, 2}},
		{name: "both 0 after rounding", surge: ptrIntStr(intstr.FromString("0%")), unav: ptrIntStr(intstr.FromString("10%")), desired: 5, want: [2]int32{0, 1}},
		{name: "nil means 0", desired: 3, want: [2]int32{0, 1}},
		{name: "absolute", surge: ptrIntStr(intstr.FromInt32(2)), unav: ptrIntStr(intstr.FromInt32(0)), desired: 3, want: [2]int32{2, 0}},
		{name: "malformed percent", surge: ptrIntStr(intstr.FromString("x%")), desired: 3, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, u, err := ResolveFenceposts(tt.surge, tt.unav, tt.desired)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && [2]int32{s, u} != tt.want {
				t.Errorf("got surge %d unavailable %d, want %v", s, u, tt.want)
			}
		})
	}
}

func TestIsPodAvailable(t *testing.T) {
	now := time.Now()
	pod := func(ready bool, since time.Time) *corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(since)}}}}
	}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		minReady int32
		want     bool
		wait     bool // availableIn > 0
	}{
		{name: "ready, no minReadySeconds", pod: pod(true, now), want: true},
		{name: "not ready", pod: pod(false, now.Add(-time.Hour)), minReady: 1},
		{name: "ready too briefly", pod: pod(true, now.Add(-500*time.Millisecond)), minReady: 1, wait: true},
		{name: "ready long enough", pod: pod(true, now.Add(-2*time.Second)), minReady: 1, want: true},
		{name: "ready, unknown since", pod: pod(true, time.Time{}), minReady: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsPodAvailable(tt.pod, tt.minReady, now); got != tt.want {
				t.Errorf("IsPodAvailable = %v, want %v", got, tt.want)
			}
			if got := availableIn(tt.pod, tt.minReady, now) > 0; got != tt.wait {
				t.Errorf("availableIn > 0 = %v, want %v", got, tt.wait)
			}
		})
	}
}
