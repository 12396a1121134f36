package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/pinlab/pinlab/internal/kubeapi"
	"github.com/pinlab/pinlab/internal/podforward"
	"github.com/pinlab/pinlab/internal/runner"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// Cluster is one variant's namespace of the remote cluster, as the runner
// uses it (runner.Cluster, runner.ClientHost). Safe for concurrent use.
type Cluster struct {
	cfg       Config
	namespace string
	api       kubeapi.Client
	factory   informers.SharedInformerFactory
	forward   *podforward.PortForward
	admin     *http.Client // to pods' admin endpoints, through forward
	stop      chan struct{}
	failed    chan struct{} // closed by fail
	failOnce  sync.Once
	failErr   error
	leaseDone chan struct{} // closed when renewLease returns; nil before holdLease
	closeOnce sync.Once
	closeErr  error
}

var (
	_ runner.Cluster    = (*Cluster)(nil)
	_ runner.ClientHost = (*Cluster)(nil)
)

// Apply applies the variant's objects in its namespace (objects).
func (c *Cluster) Apply(ctx context.Context, objs []runtime.Object) error {
	objs, err := c.objects(objs)
	if err != nil {
		return err
	}
	return c.api.Apply(ctx, objs)
}

// WaitReady waits until the namespace's Deployments and StatefulSets have
// every replica ready and each Service's EndpointSlices list exactly its
// ready pods. A pod that waits for its image longer than PullTimeout
// fails it, naming the pod and the kubelet's message.
func (c *Cluster) WaitReady(ctx context.Context) error {
	if err := c.api.WaitWorkloads(ctx, nil); err != nil {
		return err
	}
	var short string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		short = c.slicesShort()
		return short == "", nil
	})
	if err != nil && short != "" {
		return fmt.Errorf("%s: %w", short, err)
	}
	return err
}

// slicesShort names the first Service whose EndpointSlices do not list
// exactly its ready pods as ready ("" when all do).
func (c *Cluster) slicesShort() string {
	svcs, _ := c.factory.Core().V1().Services().Lister().Services(c.namespace).List(labels.Everything())
	for _, s := range svcs {
		if len(s.Spec.Selector) == 0 {
			continue
		}
		pods, _ := c.factory.Core().V1().Pods().Lister().Pods(c.namespace).List(labels.SelectorFromSet(s.Spec.Selector))
		want := map[string]bool{}
		for _, p := range pods {
			if podReady(p) && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
				want[p.Status.PodIP] = true
			}
		}
		slices, _ := c.factory.Discovery().V1().EndpointSlices().Lister().EndpointSlices(c.namespace).List(
			labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Name}))
		got := map[string]bool{}
		for _, sl := range slices {
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					for _, a := range e.Addresses {
						got[a] = true
					}
				}
			}
		}
		if len(got) != len(want) {
			return fmt.Sprintf("Service %s/%s: its EndpointSlices list %d ready endpoints, %d pods are ready", c.namespace, s.Name, len(got), len(want))
		}
		for a := range want {
			if !got[a] {
				return fmt.Sprintf("Service %s/%s: ready pod %s not in its EndpointSlices yet", c.namespace, s.Name, a)
			}
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Scale, UpdateTemplate, RolloutRestart and DeletePod change the
// namespace's workloads and pods as kubectl does (package kubeapi).
func (c *Cluster) Scale(ctx context.Context, kind, namespace, name string, replicas int32) error {
	return c.api.Scale(ctx, kind, namespace, name, replicas)
}

// UpdateTemplate applies edit to the template as the scenario wrote it
// (image "pinlab"), then makes it run on the cluster again (template).
func (c *Cluster) UpdateTemplate(ctx context.Context, kind, namespace, name string, edit func(*corev1.PodTemplateSpec)) error {
	var err error
	e := c.api.UpdateTemplate(ctx, kind, namespace, name, func(t *corev1.PodTemplateSpec) {
		if len(t.Spec.Containers) == 1 && t.Spec.Containers[0].Image == c.cfg.Image {
			t.Spec.Containers[0].Image = "pinlab"
		}
		edit(t)
		err = c.template(t)
	})
	return errors.Join(err, e)
}

func (c *Cluster) RolloutRestart(ctx context.Context, kind, namespace, name string) error {
	return c.api.RolloutRestart(ctx, kind, namespace, name)
}

func (c *Cluster) DeletePod(ctx context.Context, namespace, name string, grace *int64) error {
	return c.api.DeletePod(ctx, namespace, name, grace)
}

// Client is the API's client.
func (c *Cluster) Client() kubernetes.Interface { return c.cfg.Clientset }

// Informers are the namespace's informers.
func (c *Cluster) Informers() informers.SharedInformerFactory { return c.factory }

// StartInformers starts informers added since Start, until Close.
func (c *Cluster) StartInformers() { c.factory.Start(c.stop) }

// PodCIDR is unknown on a remote cluster: the zero Prefix.
func (c *Cluster) PodCIDR() netip.Prefix { return netip.Prefix{} }

// DNSAddr is "": clients resolve through the cluster DNS of their pods'
// resolv.conf.
func (c *Cluster) DNSAddr() string { return "" }

// SyncDNSLog returns at once: the cluster DNS's answers are not logged.
func (c *Cluster) SyncDNSLog(context.Context) error { return nil }

// Failed is closed when the run can no longer measure the variant: a
// load client's events could not be read for feedLost (its pod gone for
// good, the API server or its port-forward no longer answering). A pod
// that fails otherwise shows in the figures.
func (c *Cluster) Failed() <-chan struct{} { return c.failed }

// Err says why Failed closed; nil before.
func (c *Cluster) Err() error {
	select {
	case <-c.failed:
		return c.failErr
	default:
		return nil
	}
}

// fail records the first reason the variant cannot be measured and
// closes Failed.
func (c *Cluster) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		close(c.failed)
	})
}

// KillPod, HangPod, SetPodReady and SetPodHealthy ask the pod's admin
// endpoint (pod.AdminHandler) through port-forward.
func (c *Cluster) KillPod(namespace, name string) error {
	return c.adminCall(namespace, name, "/kill")
}

func (c *Cluster) HangPod(namespace, name string, hang bool) error {
	return c.adminCall(namespace, name, "/hang?to="+strconv.FormatBool(hang))
}

func (c *Cluster) SetPodReady(namespace, name string, ready bool) error {
	return c.adminCall(namespace, name, "/ready?to="+strconv.FormatBool(ready))
}

func (c *Cluster) SetPodHealthy(namespace, name string, healthy bool) error {
	return c.adminCall(namespace, name, "/healthy?to="+strconv.FormatBool(healthy))
}

// adminTimeout bounds one admin call, the port-forward's opening included.
const adminTimeout = podforward.OpenTimeout + 5*time.Second

// adminCall POSTs path to the pod's admin endpoint; errors name the pod
// and carry the endpoint's answer.
func (c *Cluster) adminCall(namespace, name, path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+namespace+"."+name+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	resp, err := c.admin.Do(req)
	if err != nil {
		return fmt.Errorf("pod %s/%s: admin endpoint: %w", namespace, name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pod %s/%s: admin endpoint %s: %s %s", namespace, name, path, resp.Status, body)
	}
	return nil
}

// podDialer dials the pod that a request's host names ("NAMESPACE.NAME")
// at port, through forward.
func podDialer(forward *podforward.PortForward, port uint16) func(ctx context.Context, _, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ns, name, ok := cutPodHost(host)
		if !ok {
			return nil, fmt.Errorf("remote: %q names no pod", host)
		}
		return forward.DialPod(ctx, ns, name, port)
	}
}

// cutPodHost splits "NAMESPACE.NAME": namespaces have no dots, pod
// names may.
func cutPodHost(host string) (namespace, name string, ok bool) {
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			return host[:i], host[i+1:], i > 0 && i < len(host)-1
		}
	}
	return "", "", false
}

// NodeIP is unknown: the zero Addr.
func (c *Cluster) NodeIP() netip.Addr { return netip.Addr{} }

// AllocateIP fails: on a cluster, pods get their addresses from its
// network.
func (c *Cluster) AllocateIP() (netip.Addr, error) {
	return netip.Addr{}, errors.New("remote: a cluster's pod addresses are its network's")
}

// Close stops the informers, port-forwards and the Lease's renewal and,
// unless Config.Keep, deletes the namespace and waits until it is gone
// (at most deleteTimeout); with Keep, it releases the Lease.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		c.factory.Shutdown()
		c.closeErr = c.forward.Close()
		if c.leaseDone != nil {
			<-c.leaseDone
		}
		switch {
		case !c.cfg.Keep:
			c.closeErr = errors.Join(c.closeErr, deleteNamespaces(c.cfg.Clientset, []string{c.namespace}, c.cfg.logger()))
		case c.leaseDone != nil:
			if err := c.releaseLease(); err != nil {
				c.closeErr = errors.Join(c.closeErr, fmt.Errorf("release lease %s/%s: %w", c.namespace, LeaseName, err))
			}
		}
	})
	return c.closeErr
}

// deleteTimeout bounds the wait for a namespace's deletion: its pods'
// grace periods (30 s by default) and the namespace controller's sweep.
const deleteTimeout = 3 * time.Minute

// deleteNamespaces deletes the namespaces (the namespace controller
// empties each before it goes) and waits until each is gone, at most
// deleteTimeout; the error names those still there.
func deleteNamespaces(cs kubernetes.Interface, names []string, log interface{ Info(string, ...any) }) error {
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	var errs []error
	for _, n := range names {
		err := cs.CoreV1().Namespaces().Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", n, err))
		}
		log.Info("deleting namespace", "namespace", n)
	}
	for _, n := range names {
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: still there after %v", n, deleteTimeout))
		}
	}
	return errors.Join(errs...)
}
