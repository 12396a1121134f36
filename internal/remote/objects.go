package remote

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/workload"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

// objects returns the variant's objects as the cluster gets them: without
// Namespace objects (Start created the namespace), each labelled with the
// run, and every pinlab pod template made to run the image (template).
func (c *Cluster) objects(objs []runtime.Object) ([]runtime.Object, error) {
	var out []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*corev1.Namespace); ok {
			continue
		}
		m, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}
		m.SetLabels(withRunLabel(m.GetLabels(), c.cfg.Run))
		var t *corev1.PodTemplateSpec
		switch w := o.(type) {
		case *appsv1.Deployment:
			t = &w.Spec.Template
		case *appsv1.StatefulSet:
			t = &w.Spec.Template
		}
		if t != nil {
			if err := c.template(t); err != nil {
				return nil, fmt.Errorf("%T %s: %w", o, m.GetName(), err)
			}
		}
		out = append(out, o)
	}
	return out, nil
}

func withRunLabel(l map[string]string, run string) map[string]string {
	if l == nil {
		l = map[string]string{}
	}
	l[RunLabel] = run
	return l
}

// template makes a pinlab pod template run on a real cluster:
//   - the image is Config.Image (the scenario names it "pinlab");
//   - the ports the lab reads from the spec are made explicit args
//     (--port, --http-port, --metrics-port): the image's process does not
//     see its spec;
//   - POD_NAME and POD_NAMESPACE come from the downward API, the admin
//     endpoint is on (AdminPort, the run's token from TokenSecret);
//   - a gRPC readiness probe of the whole server asks for
//     pod.ReadinessService, which the admin endpoint's /ready turns off
//     (the lab's node fails the probe itself);
//   - resource requests and limits (podResources).
//
// Templates of other images are left as they are.
func (c *Cluster) template(t *corev1.PodTemplateSpec) error {
	t.Labels = withRunLabel(t.Labels, c.cfg.Run)
	if len(t.Spec.Containers) != 1 || !workload.IsPinlabImage(t.Spec.Containers[0].Image) {
		return nil
	}
	w, err := workload.For(&t.Spec)
	if err != nil {
		return err
	}
	ct := &t.Spec.Containers[0]
	args, err := workload.ContainerArgs(ct)
	if err != nil {
		return err
	}
	args = explicitPorts(args, w)
	ct.Command, ct.Args = nil, args
	ct.Image, ct.ImagePullPolicy = c.cfg.Image, corev1.PullIfNotPresent
	ct.Env = setEnv(ct.Env, append(podEnv(), corev1.EnvVar{Name: pod.AdminPortEnv, Value: strconv.Itoa(AdminPort)}))
	if p := ct.ReadinessProbe; p != nil && p.GRPC != nil && (p.GRPC.Service == nil || *p.GRPC.Service == "") {
		svc := pod.ReadinessService
		p.GRPC.Service = &svc
	}
	ct.Resources = podResources()
	if t.Spec.SecurityContext == nil {
		t.Spec.SecurityContext = podSecurity()
	}
	if ct.SecurityContext == nil {
		ct.SecurityContext = containerSecurity()
	}
	if t.Spec.AutomountServiceAccountToken == nil {
		t.Spec.AutomountServiceAccountToken = ptr(false)
	}
	return nil
}

// podSecurity and containerSecurity make the run's pods pass the
// "restricted" Pod Security Standard, which namespaces may enforce: the
// image runs as 65532, needs no capability, no privilege escalation and
// no API token (the load client's grpc resolver asks the cluster DNS).
func podSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

func containerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func ptr[T any](v T) *T { return &v }

// explicitPorts appends the ports workload.For resolved from the spec to
// args, where args do not give them.
func explicitPorts(args []string, w workload.Container) []string {
	a := w.Args
	add := func(flag string, set, port int) {
		if set == 0 && port != 0 {
			args = append(args, flag+"="+strconv.Itoa(port))
		}
	}
	add("--port", a.Port, w.Port)
	add("--http-port", a.HTTPPort, w.HTTPPort)
	add("--metrics-port", a.MetricsPort, w.MetricsPort)
	return args
}

// podEnv is what every pod of the run is given: its name and namespace
// (the downward API) and the run's token.
func podEnv() []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		{Name: pod.TokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: TokenSecret}, Key: TokenKey}}},
	}
}

// setEnv sets each of vars in env, replacing a variable of the same name.
func setEnv(env, vars []corev1.EnvVar) []corev1.EnvVar {
	for _, v := range vars {
		i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == v.Name })
		if i < 0 {
			env = append(env, v)
			continue
		}
		env[i] = v
	}
	return env
}

// podResources are the requests and limits of every pod of the run.
// Requests are small (10m CPU, 32 MiB) so that a scenario's peak pods fit
// a small cluster: on the real control plane tier (one node of 2 CPUs)
// requests of 100m left 8 of 16 pods added by scale-out's two variants
// side by side unschedulable. Memory is limited (256 MiB, about 8 times
// what a pricing pod or a load client uses at the built-ins' rates); CPU
// at one CPU, above what they use, so that CFS throttling does not add
// its own latency to the figures.
func podResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
}
