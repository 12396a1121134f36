package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
)

func statefulSet(name string, replicas int32) *appsv1.StatefulSet {
	lbl := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "db", Image: "pinlab", Args: []string{"pod", "pricing"},
					Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432}}}}}},
		},
	}
}

func podNames(t *testing.T, c *Cluster) (names []string, terminating map[string]bool) {
	terminating = map[string]bool{}
	for _, p := range listPods(t, c) {
		names = append(names, p.Name)
		if p.DeletionTimestamp != nil {
			terminating[p.Name] = true
		}
	}
	sort.Strings(names)
	return names, terminating
}

func scaleSet(t *testing.T, c *Cluster, name string, n int32) {
	t.Helper()
	s, err := c.Client().AppsV1().StatefulSets("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = &n
	if _, err := c.Client().AppsV1().StatefulSets("shop").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func finishDeletion(t *testing.T, c *Cluster, pod string) {
	t.Helper()
	zero := int64(0)
	if err := c.Client().CoreV1().Pods("shop").Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
}

func TestStatefulSetOrderedReady(t *testing.T) {
	c := startCluster(t)
	svc := func(name string, headless bool) *corev1.Service {
		s := service(name, headless)
		s.Spec.Selector = map[string]string{"app": "db"}
		s.Spec.Ports = []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromString("pg")}}
		return s
	}
	mustCreate(t, c, svc("db", true))
	mustCreate(t, c, svc("db-other", true))
	if _, err := c.Client().AppsV1().StatefulSets("shop").Create(context.Background(), statefulSet("db", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Pods come one at a time: db-1 only after db-0 is Ready.
	for i := range 3 {
		want := fmt.Sprintf("db-%d", i)
		eventually(t, want+" created alone", func() (bool, string) {
			names, _ := podNames(t, c)
			return len(names) == i+1 && names[i] == want, fmt.Sprint(names)
		})
		runPods(t, c)
	}
	p, err := c.Client().CoreV1().Pods("shop").Get(context.Background(), "db-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.Hostname != "db-1" || p.Spec.Subdomain != "db" || p.Labels[PodNameLabel] != "db-1" || p.Labels[PodIndexLabel] != "1" {
		t.Errorf("db-1: hostname %q subdomain %q labels %v", p.Spec.Hostname, p.Spec.Subdomain, p.Labels)
	}
	hostnames := func(svc string) map[string]bool {
		out := map[string]bool{}
		for _, s := range slicesOf(t, c, svc) {
			for _, ep := range s.Endpoints {
				if ep.Hostname != nil {
					out[*ep.Hostname] = true
				}
			}
		}
		return out
	}
	eventually(t, "governing Service publishes hostnames", func() (bool, string) {
		h := hostnames("db")
		return len(h) == 3 && h["db-0"] && h["db-2"], fmt.Sprint(h)
	})
	if h := hostnames("db-other"); len(h) != 0 {
		t.Errorf("a non-governing Service got hostnames %v; only the Service named in subdomain may", h)
	}

	// Scale down: highest ordinal first, one at a time.
	scaleSet(t, c, "db", 1)
	eventually(t, "db-2 terminating", func() (bool, string) {
		_, term := podNames(t, c)
		return term["db-2"], fmt.Sprint(term)
	})
	if _, term := podNames(t, c); term["db-1"] {
		t.Fatal("db-1 terminating while db-2 is still there")
	}
	finishDeletion(t, c, "db-2")
	eventually(t, "db-1 terminating after db-2 is gone", func() (bool, string) {
		_, term := podNames(t, c)
		return term["db-1"], fmt.Sprint(term)
	})
	finishDeletion(t, c, "db-1")

	// A deleted pod comes back under its name with a new IP.
	old, _ := c.Client().CoreV1().Pods("shop").Get(context.Background(), "db-0", metav1.GetOptions{})
	if err := c.Client().CoreV1().Pods("shop").Delete(context.Background(), "db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	finishDeletion(t, c, "db-0")
	eventually(t, "db-0 recreated", func() (bool, string) {
		p, err := c.Client().CoreV1().Pods("shop").Get(context.Background(), "db-0", metav1.GetOptions{})
		return err == nil && p.UID != old.UID, fmt.Sprint(err)
	})
	runPods(t, c)
	fresh, _ := c.Client().CoreV1().Pods("shop").Get(context.Background(), "db-0", metav1.GetOptions{})
	if fresh.Status.PodIP == "" || fresh.Status.PodIP == old.Status.PodIP {
		t.Errorf("restarted db-0 has IP %q, old %q: want a new IP", fresh.Status.PodIP, old.Status.PodIP)
	}
	eventually(t, "db-0 published at its new IP", func() (bool, string) {
		got := readyAddrs(slicesOf(t, c, "db"))
		return len(got) == 1 && got[0] == fresh.Status.PodIP, fmt.Sprint(got)
	})
}

func TestStatefulSetParallel(t *testing.T) {
	c := startCluster(t)
	s := statefulSet("cache", 4)
	s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	if _, err := c.Client().AppsV1().StatefulSets("shop").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "all 4 pods at once, none ready", func() (bool, string) {
		names, _ := podNames(t, c)
		return len(names) == 4, fmt.Sprint(names)
	})
}

func TestOrdinal(t *testing.T) {
	tests := []struct {
		pod  string
		want int
	}{{"db-0", 0}, {"db-12", 12}, {"db-01", -1}, {"db-x", -1}, {"dbx-1", -1}, {"db--1", -1}, {"db-1-2", -1}}
	for _, tt := range tests {
		if got := ordinal("db", tt.pod); got != tt.want {
			t.Errorf("ordinal(db, %s) = %d, want %d", tt.pod, got, tt.want)
		}
	}
}

func getSet(t *testing.T, c *Cluster, name string) *appsv1.StatefulSet {
	t.Helper()
	s, err := c.Client().AppsV1().StatefulSets("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func updateSet(t *testing.T, c *Cluster, name string, change func(*appsv1.StatefulSet)) {
	t.Helper()
	s := getSet(t, c, name)
	change(s)
	if _, err := c.Client().AppsV1().StatefulSets("shop").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podsByName returns the pods of namespace shop by name.
func podsByName(t *testing.T, c *Cluster) map[string]corev1.Pod {
	out := map[string]corev1.Pod{}
	for _, p := range listPods(t, c) {
		out[p.Name] = p
	}
	return out
}

func TestStatefulSetRollingUpdate(t *testing.T) {
	tests := []struct {
		name           string
		policy         appsv1.PodManagementPolicyType
		maxUnavailable *intstr.IntOrString
		partition      int32
		wantDeleted    []string // in order; a pair in one step when maxUnavailable is 2
		wantMaxDown    int      // most pods of db-0..db-2 unavailable at once
		sequential     bool     // each deletion waits for the pod above to be back, updated and Ready
	}{
		{name: "OrderedReady", policy: appsv1.OrderedReadyPodManagement, wantDeleted: []string{"db-2", "db-1", "db-0"}, wantMaxDown: 1, sequential: true},
		{name: "Parallel", policy: appsv1.ParallelPodManagement, wantDeleted: []string{"db-2", "db-1", "db-0"}, wantMaxDown: 1, sequential: true},
		{name: "Parallel, maxUnavailable 2", policy: appsv1.ParallelPodManagement, maxUnavailable: ptrIntStr(intstr.FromInt32(2)),
			wantDeleted: []string{"db-2", "db-1", "db-0"}, wantMaxDown: 2},
		{name: "partition 1", policy: appsv1.OrderedReadyPodManagement, partition: 1, wantDeleted: []string{"db-2", "db-1"}, wantMaxDown: 1, sequential: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startCluster(t)
			kubelet{linger: 10 * time.Millisecond}.start(t, c)
			s := statefulSet("db", 3)
			s.Spec.PodManagementPolicy = tt.policy
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: &tt.partition, MaxUnavailable: tt.maxUnavailable}
			if _, err := c.Client().AppsV1().StatefulSets("shop").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitRollout(t, c, KindStatefulSet, "db")
			before := podsByName(t, c)
			oldRev := getSet(t, c, "db").Status.UpdateRevision
			if len(before) != 3 || before["db-0"].Labels[appsv1.StatefulSetRevisionLabel] != oldRev {
				t.Fatalf("before the update: %d pods, db-0 at revision %q, want 3 pods at %q", len(before), before["db-0"].Labels[appsv1.StatefulSetRevisionLabel], oldRev)
			}

			var deleted []string
			maxDown := 0
			w := watchPods(t, c, func(pods map[string]*corev1.Pod, ev watch.Event) string {
				down := 0
				for i := range 3 {
					p := pods[fmt.Sprintf("db-%d", i)]
					if p == nil || p.DeletionTimestamp != nil || !IsPodReady(p) {
						down++
					}
				}
				maxDown = max(maxDown, down)
				p := ev.Object.(*corev1.Pod)
				if ev.Type != watch.Modified || p.DeletionTimestamp == nil || slices.Contains(deleted, p.Name) {
					return ""
				}
				deleted = append(deleted, p.Name)
				if i := ordinal("db", p.Name); tt.sequential && i < 2 {
					above := pods[fmt.Sprintf("db-%d", i+1)]
					if above == nil || above.DeletionTimestamp != nil || !IsPodReady(above) || above.Labels[appsv1.StatefulSetRevisionLabel] == oldRev {
						return fmt.Sprintf("%s deleted before db-%d was back, updated and Ready", p.Name, i+1)
					}
				}
				return ""
			})
			updateSet(t, c, "db", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "pinlab:v2" })
			waitRollout(t, c, KindStatefulSet, "db")
			eventually(t, "3 pods, none terminating", func() (bool, string) {
				names, term := podNames(t, c)
				return len(names) == 3 && len(term) == 0, fmt.Sprint(names, term)
			})
			if _, failure := w.result(); failure != "" {
				t.Fatal(failure)
			}
			if diff := cmp.Diff(tt.wantDeleted, deleted); diff != "" {
				t.Errorf("deletion order (-want +got):\n%s", diff)
			}
			if maxDown != tt.wantMaxDown {
				t.Errorf("at most %d pods were down at once, want %d", maxDown, tt.wantMaxDown)
			}

			set := getSet(t, c, "db")
			newRev := set.Status.UpdateRevision
			after := podsByName(t, c)
			for i := range 3 {
				name := fmt.Sprintf("db-%d", i)
				updated := int32(i) >= tt.partition
				p := after[name]
				if got := p.Labels[appsv1.StatefulSetRevisionLabel] == newRev; got != updated {
					t.Errorf("%s at revision %q; updated = %v, want %v", name, p.Labels[appsv1.StatefulSetRevisionLabel], got, updated)
				}
				if got := p.UID != before[name].UID; got != updated {
					t.Errorf("%s replaced = %v, want %v", name, got, updated)
				}
				if p.Spec.Hostname != name || p.Spec.Subdomain != "db" {
					t.Errorf("%s: hostname %q subdomain %q", name, p.Spec.Hostname, p.Spec.Subdomain)
				}
			}
			wantCurrent := newRev
			if tt.partition > 0 {
				wantCurrent = oldRev
			}
			if set.Status.CurrentRevision != wantCurrent || set.Status.UpdatedReplicas != 3-tt.partition || newRev == oldRev {
				t.Errorf("status: current %q updated %d (update revision %q); want current %q, %d updated, a new update revision",
					set.Status.CurrentRevision, set.Status.UpdatedReplicas, newRev, wantCurrent, 3-tt.partition)
			}
			if tt.partition == 0 {
				return
			}
			// A pod below the partition comes back at the current revision...
			if err := c.Client().CoreV1().Pods("shop").Delete(context.Background(), "db-0", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "db-0 recreated at the old revision", func() (bool, string) {
				p := podsByName(t, c)["db-0"]
				return p.UID != "" && p.UID != before["db-0"].UID && p.DeletionTimestamp == nil, p.Labels[appsv1.StatefulSetRevisionLabel]
			})
			if got := podsByName(t, c)["db-0"].Labels[appsv1.StatefulSetRevisionLabel]; got != oldRev {
				t.Errorf("db-0 recreated at %q, want the current revision %q", got, oldRev)
			}
			// ...until the partition drops.
			updateSet(t, c, "db", func(s *appsv1.StatefulSet) { *s.Spec.UpdateStrategy.RollingUpdate.Partition = 0 })
			waitRollout(t, c, KindStatefulSet, "db")
			eventually(t, "currentRevision = updateRevision", func() (bool, string) {
				st := getSet(t, c, "db").Status
				return st.CurrentRevision == newRev && st.CurrentReplicas == 3, fmt.Sprintf("%+v", st)
			})
		})
	}
}

func TestStatefulSetOnDelete(t *testing.T) {
	c := startCluster(t)
	kubelet{}.start(t, c)
	s := statefulSet("db", 2)
	s.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	if _, err := c.Client().AppsV1().StatefulSets("shop").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "2 ready pods", func() (bool, string) {
		st := getSet(t, c, "db").Status
		return st.ReadyReplicas == 2, fmt.Sprintf("%+v", st)
	})
	if _, _, err := c.RolloutStatus(context.Background(), KindStatefulSet, "shop", "db"); err == nil {
		t.Error("RolloutStatus of an OnDelete StatefulSet succeeded, want an error as kubectl gives")
	}
	oldRev := getSet(t, c, "db").Status.CurrentRevision
	updateSet(t, c, "db", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "pinlab:v2" })
	var newRev string
	eventually(t, "the update revision observed", func() (bool, string) {
		set := getSet(t, c, "db")
		newRev = set.Status.UpdateRevision
		return set.Status.ObservedGeneration == set.Generation && newRev != oldRev, fmt.Sprintf("%+v", set.Status)
	})
	// The sync that recorded the new revision deleted nothing.
	for _, p := range listPods(t, c) {
		if p.DeletionTimestamp != nil || p.Labels[appsv1.StatefulSetRevisionLabel] != oldRev {
			t.Fatalf("%s: terminating %v, revision %q; OnDelete must leave pods alone", p.Name, p.DeletionTimestamp != nil, p.Labels[appsv1.StatefulSetRevisionLabel])
		}
	}
	if err := c.Client().CoreV1().Pods("shop").Delete(context.Background(), "db-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "db-1 back at the update revision", func() (bool, string) {
		p := podsByName(t, c)["db-1"]
		return p.DeletionTimestamp == nil && p.Labels[appsv1.StatefulSetRevisionLabel] == newRev, p.Labels[appsv1.StatefulSetRevisionLabel]
	})
	if got := podsByName(t, c)["db-0"].Labels[appsv1.StatefulSetRevisionLabel]; got != oldRev {
		t.Errorf("db-0 at %q, want %q", got, oldRev)
	}
}

func TestStatefulSetRevisionHistory(t *testing.T) {
	c := startCluster(t)
	kubelet{}.start(t, c)
	s := statefulSet("db", 1)
	one := int32(1)
	s.Spec.RevisionHistoryLimit = &one
	if _, err := c.Client().AppsV1().StatefulSets("shop").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, c, KindStatefulSet, "db")
	first := getSet(t, c, "db").Status.UpdateRevision
	for _, image := range []string{"pinlab:v2", "pinlab:v3", "pinlab"} {
		updateSet(t, c, "db", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = image })
		waitRollout(t, c, KindStatefulSet, "db")
	}
	// Back at the first template: its revision is reused and renumbered; one
	// old revision besides the live one is kept (truncated by the sync after
	// the one that completed the rollout).
	revs := func() map[string]int64 {
		l, err := c.Client().AppsV1().ControllerRevisions("shop").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, r := range l.Items {
			out[r.Name] = r.Revision
		}
		return out
	}
	eventually(t, "two revisions left", func() (bool, string) {
		r := revs()
		return len(r) == 2, fmt.Sprint(r)
	})
	set := getSet(t, c, "db")
	if r := revs(); set.Status.UpdateRevision != first || r[first] != 4 || !slices.Contains(slices.Collect(maps.Values(r)), 3) {
		t.Errorf("update revision %q (first was %q), revisions %v; want the first renumbered 4 and revision 3", set.Status.UpdateRevision, first, r)
	}
}
