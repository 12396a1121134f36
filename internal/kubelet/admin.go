package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// adminConfig reads the container's admin endpoint settings: port 0 when
// it asks for none. A token from a Secret is read through the API, as a
// kubelet resolves secretKeyRef. Errors say what is wrong, as the image
// would refuse to start.
func (w *podWorker) adminConfig(ctx context.Context, p *corev1.Pod) (port int, token string, err error) {
	if len(p.Spec.Containers) != 1 {
		return 0, "", nil
	}
	env := p.Spec.Containers[0].Env
	var portText string
	for _, e := range env {
		switch e.Name {
		case pod.AdminPortEnv:
			portText = e.Value
		case pod.TokenEnv:
			if token, err = w.envValue(ctx, p, e); err != nil {
				return 0, "", err
			}
		}
	}
	port, err = pod.AdminPort(portText, token)
	return port, token, err
}

// envValue is the value of an env var of pod p's container: its value,
// its Secret's key, or the pod's field (fieldValue).
func (w *podWorker) envValue(ctx context.Context, p *corev1.Pod, e corev1.EnvVar) (string, error) {
	ref := e.ValueFrom
	switch {
	case ref == nil:
		return e.Value, nil
	case ref.FieldRef != nil:
		return w.fieldValue(p, e)
	case ref.SecretKeyRef == nil:
		return "", fmt.Errorf("$%s: the lab's node reads env values, Secrets' keys and the pod's fields only", e.Name)
	}
	s, err := w.k.client.CoreV1().Secrets(p.Namespace).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("$%s: secret %q: %w", e.Name, ref.SecretKeyRef.Name, err)
	}
	v, ok := s.Data[ref.SecretKeyRef.Key]
	if !ok {
		return "", fmt.Errorf("$%s: secret %q has no key %q", e.Name, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
	}
	return string(v), nil
}

// podAdmin is the admin endpoint's view of a pod of this kubelet: the
// process's own readiness service and health, and the kubelet's hang
// (which it records and reports, as lab hang does).
type podAdmin struct {
	k               *Kubelet
	srv             server
	namespace, name string
}

func (a podAdmin) SetReady(ok bool)   { a.srv.SetReady(ok) }
func (a podAdmin) SetHealthy(ok bool) { a.srv.SetHealthy(ok) }
func (a podAdmin) Hang(_ context.Context, hang bool) error {
	return a.k.Hang(a.namespace, a.name, hang)
}

// serveAdmin serves c's admin endpoint on the pod IP at port, in the
// pod's network namespace, until ctx ends (the container's end), as the
// pinlab image does in a real cluster's pod; /kill is Kubelet.Kill.
func (w *podWorker) serveAdmin(ctx context.Context, p *corev1.Pod, c *container, port int, token string) error {
	srv, ok := c.srv.(server)
	if !ok {
		return fmt.Errorf("admin endpoint: the container serves no calls")
	}
	addr := netip.AddrPortFrom(w.ip, uint16(port)).String()
	var ln net.Listener
	listen := func() (err error) {
		ln, err = loopback.Listen(ctx, addr)
		return err
	}
	var err error
	if w.sandbox != nil {
		err = w.sandbox.Do(listen)
	} else {
		err = listen()
	}
	if err != nil {
		return fmt.Errorf("admin endpoint: %w", err)
	}
	a := podAdmin{k: w.k, srv: srv, namespace: p.Namespace, name: p.Name}
	kill := func() { w.k.Kill(p.Namespace, p.Name) }
	hs := pod.EndpointServer(pod.AdminHandler(a, token, kill))
	c.probes.Add(2)
	go func() {
		defer c.probes.Done()
		hs.Serve(ln)
	}()
	go func() {
		defer c.probes.Done()
		<-ctx.Done()
		hs.Close()
	}()
	c.out.Printf("pinlab pod %s/%s: admin endpoint on %s", p.Namespace, p.Name, addr)
	return nil
}
