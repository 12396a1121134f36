package remote

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/runner"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

const testImage = "registry.example/pinlab@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func testConfig(t *testing.T) (Config, *fake.Clientset) {
	cs := fake.NewClientset()
	return Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, Clientset: cs, Run: "ab12cd34", Image: testImage,
		Token: NewToken(), LoadDuration: time.Minute}, cs
}

func pricing(ns string) *appsv1.Deployment {
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pricing"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "pricing"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "pricing", Image: "pinlab", Args: []string{"pod", "pricing"},
					Ports:          []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}, {Name: "metrics", ContainerPort: 9471}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471}}},
				}}},
			}},
	}
}

// TestTemplate: a pinlab pod template gets the image, explicit ports,
// the downward API, the admin endpoint with the run's token, the
// readiness service and resources; twice gives the same template.
func TestTemplate(t *testing.T) {
	cfg, _ := testConfig(t)
	c := &Cluster{cfg: cfg}
	d := pricing("ns")
	if err := c.template(&d.Spec.Template); err != nil {
		t.Fatal(err)
	}
	ct := d.Spec.Template.Spec.Containers[0]
	if ct.Image != testImage {
		t.Errorf("image %q, want %q", ct.Image, testImage)
	}
	if want := []string{"pod", "pricing", "--port=8471", "--metrics-port=9471"}; !slices.Equal(ct.Args, want) {
		t.Errorf("args %q, want %q", ct.Args, want)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ct.Env {
		env[e.Name] = e
	}
	if e := env["POD_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME %+v, want the downward API's metadata.name", e)
	}
	if e := env[pod.TokenEnv]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != TokenSecret {
		t.Errorf("%s %+v, want Secret %s", pod.TokenEnv, e, TokenSecret)
	}
	if e := env[pod.AdminPortEnv]; e.Value != "9481" {
		t.Errorf("%s %q, want 9481", pod.AdminPortEnv, e.Value)
	}
	if s := ct.ReadinessProbe.GRPC.Service; s == nil || *s != pod.ReadinessService {
		t.Errorf("readiness probe service %v, want %q", s, pod.ReadinessService)
	}
	if ct.Resources.Limits.Memory().IsZero() || ct.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v, want requests and limits", ct.Resources)
	}
	if d.Spec.Template.Labels[RunLabel] != cfg.Run {
		t.Errorf("template labels %v, want %s=%s", d.Spec.Template.Labels, RunLabel, cfg.Run)
	}
	before := d.Spec.Template.DeepCopy()
	before.Spec.Containers[0].Image = "pinlab"
	if err := c.template(before); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before.Spec.Containers[0].Args, ct.Args) || len(before.Spec.Containers[0].Env) != len(ct.Env) {
		t.Errorf("a second rewrite changed the template: args %q env %d, want %q env %d", before.Spec.Containers[0].Args, len(before.Spec.Containers[0].Env), ct.Args, len(ct.Env))
	}
}

// TestStartClose: Start creates the labelled namespace and the token
// Secret; Close deletes the namespace; objects outside it are refused.
func TestStartClose(t *testing.T) {
	cfg, cs := testConfig(t)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := Namespace(cfg.Run, 1)
	v := plan.Variant{Name: "headless rr", Objects: []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, pricing(ns)}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.Start(ctx, runner.Setup{Index: 1, Variant: v})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[RunLabel] != cfg.Run || got.Labels[VariantLabel] != "headless_rr" {
		t.Errorf("namespace labels %v", got.Labels)
	}
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, TokenSecret, metav1.GetOptions{})
	if err != nil || string(s.Data[TokenKey]) != cfg.Token {
		t.Errorf("token secret %v, %v", s, err)
	}
	if left, err := Leftovers(ctx, cs, cfg.Run, false); err != nil || len(left) != 1 || left[0].Namespace != ns || left[0].Run != cfg.Run || !left[0].InUse {
		t.Errorf("Leftovers = %+v, %v; want %s in use by %s", left, err, ns, cfg.Run)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace after Close: %v, want NotFound", err)
	}

	v.Objects = append(v.Objects, pricing("elsewhere"))
	if _, err := b.Start(ctx, runner.Setup{Index: 1, Variant: v}); err == nil || !strings.Contains(err.Error(), `namespace "elsewhere"`) {
		t.Errorf("Start with an object elsewhere: %v, want it refused naming the namespace", err)
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"headless-rr", "headless-rr"},
		{"a b/c", "a_b_c"},
		{"-x-", "x"},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
	} {
		if got := labelValue(tt.in); got != tt.want {
			t.Errorf("labelValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct {
		host, ns, name string
		ok             bool
	}{
		{"pinlab-ab-0.order-1", "pinlab-ab-0", "order-1", true},
		{"ns.pod.with.dots", "ns", "pod.with.dots", true},
		{"nodot", "", "", false},
		{".x", "", "x", false},
	} {
		ns, name, ok := cutPodHost(tt.host)
		if ok != tt.ok || ok && (ns != tt.ns || name != tt.name) {
			t.Errorf("cutPodHost(%q) = %q, %q, %v", tt.host, ns, name, ok)
		}
	}
}
