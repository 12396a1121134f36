package cluster

import (
	"context"
	"fmt"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
