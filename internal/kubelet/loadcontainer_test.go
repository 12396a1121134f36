package kubelet

import (
	"context"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/loadpod"
	"github.com/pinlab/pinlab/internal/pod"
)

// loadToken is the events endpoint's token, from Secret run-token.
const loadToken = "a-load-token-from-a-secret-1234"

// loadServices is the Service range of the load tests' clusters, whose
// kube-dns ClusterIP (the cluster DNS) is 127.213.0.10.
var loadServices = netip.MustParsePrefix("127.213.0.0/24")

// loadPod makes p a pod of the image's load client as `cluster run`
// writes them: the image pinned by digest, args after /pinlab, the token
// from a Secret, the pod's name and namespace from the downward API.
func loadPod(args ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Image = "127.0.0.1:5000/acme/grpc-lab@" + heldDigest
		c.Args, c.Ports = args, []corev1.ContainerPort{{Name: "events", ContainerPort: 9480}}
		field := func(path string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
		}
		c.Env = []corev1.EnvVar{
			{Name: pod.TokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "run-token"}, Key: "token"}}},
			{Name: "POD_NAME", ValueFrom: field("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
		}
	}
}

// runLoad is Config.LoadClient as the lab's engines give it (labup):
// package loadpod's Main on the node's host.
func runLoad(ctx context.Context, c LoadContainer) int {
	return loadpod.Main(ctx, c.Args, c.Getenv, loadpod.Host{
		Source: c.Source, Dial: c.Dial, EventsIP: c.EventsIP, DNS: c.DNS, Kubernetes: c.Kubernetes, Listen: c.Listen,
		SetMinResolutionInterval: c.SetMinResolutionInterval, Stdout: c.Stdout, Stderr: c.Stderr,
	})
}

// loadNode runs a node whose cluster DNS is a test DNS server at the
// kube-dns ClusterIP, on the port the kube-dns Service names (as a lab
// publishes the port its DNS bound), with Secret run-token.
func loadNode(t *testing.T, cfg Config) (*cluster.Cluster, *Kubelet, *dnstest.Server) {
	t.Helper()
	return loadNodeOn(t, cluster.Config{ServiceCIDR: loadServices, DNSIP: netip.MustParseAddr("127.213.0.10")}, cfg)
}

// loadNodeOn is loadNode on a cluster of cc, whose DNSIP is the cluster
// DNS's.
func loadNodeOn(t *testing.T, cc cluster.Config, cfg Config) (*cluster.Cluster, *Kubelet, *dnstest.Server) {
	t.Helper()
	cfg.ClusterDNS, cfg.Images, cfg.LoadClient = cc.DNSIP, []string{heldDigest}, runLoad
	c, k, _ := nodeOn(t, cc, cfg)
	dns := dnstest.StartWith(t, dnstest.Options{IP: cc.DNSIP})
	ctx := context.Background()
	svc, err := c.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].Port = int32(dns.Addr().Port())
	}
	if _, err := c.Client().CoreV1().Services("kube-system").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "run-token", Namespace: "default"}, Data: map[string][]byte{"token": []byte(loadToken)}}
	if _, err := c.Client().CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c, k, dns
}

// doneCalls is the load client's closing line, with its count of calls.
var doneCalls = regexp.MustCompile(`: done; (\d+) calls`)

// TestLoadContainer: a container of the image's load client runs on the
// node, from its pod IP, resolving its dns:/// target through the cluster
// DNS, and serves its events there with the Secret's token, after the load
// too; deleting the pod stops it.
func TestLoadContainer(t *testing.T) {
	c, k, dns := loadNode(t, Config{})
	pricing := readyPod(t, c, "pricing", nil)
	const name = "pricing.default.svc.cluster.local"
	dns.Set(name, netip.MustParseAddr(pricing.Status.PodIP))
	p := readyPod(t, c, "orders-0", loadPod("load", "--target", "dns:///"+name+":8471", "--rate", "50", "--duration", "1s",
		"--events-port", "9480", "--name", "orders", "--wait-for-ready"))
	r := &loadfeed.Reader{URL: "http://" + p.Status.PodIP + ":9480", Token: loadToken}
	var calls []loadfeed.Event
	read := func() bool {
		evs, _ := r.Poll(t.Context())
		for _, e := range evs {
			if e.Kind == loadfeed.KindCall {
				calls = append(calls, e)
			}
		}
		m := doneCalls.FindStringSubmatch(logText(t, k, "orders-0", false))
		return m != nil && m[1] == strconv.Itoa(len(calls))
	}
	if err := labtest.Poll(labtest.Context(t, 15*time.Second), 50*time.Millisecond, read); err != nil {
		t.Fatalf("%d calls read (%v); log:\n%s", len(calls), err, logText(t, k, "orders-0", false))
	}
	for _, e := range calls {
		if e.Code != codes.OK || e.Pod != "pricing" {
			t.Fatalf("call %+v, want OK from pod pricing", e)
		}
	}
	if len(calls) < 40 || len(calls) > 51 {
		t.Errorf("%d calls in 1 s at 50/s", len(calls))
	}
	log := logText(t, k, "orders-0", false)
	for _, want := range []string{
		"pinlab load orders: dns://" + dns.Addr().String() + "/" + name + ":8471 at 50 calls/s (pick_first) for 1s, events on " + p.Status.PodIP + ":9480",
		"by pod: pricing ",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if dns.Queries(name) == 0 {
		t.Error("the cluster DNS was not asked")
	}
	if err := k.Hang("default", "orders-0", true); err == nil || !strings.Contains(err.Error(), "runs the load client") {
		t.Errorf("Hang of a load client: %v, want an error", err)
	}
	// Served after the load, until the pod goes.
	if _, err := r.Poll(t.Context()); err != nil {
		t.Errorf("events after the load: %v", err)
	}
	deletePod(t, c, "orders-0")
	waitGone(t, c, "orders-0")
	if conn, err := net.DialTimeout("tcp", p.Status.PodIP+":9480", time.Second); err == nil {
		conn.Close()
		t.Error("the events endpoint still listens after the pod was deleted")
	}
}

// TestLoadContainerExits: a load client that cannot run exits as the
// image's process does (2 on bad args, 1 when it cannot start), with the
// reason in its log and status, and restarts into CrashLoopBackOff.
func TestLoadContainerExits(t *testing.T) {
	ok := []string{"load", "--target", "dns:///pricing.default.svc.cluster.local:8471", "--rate", "5", "--duration", "10s"}
	tests := []struct {
		name string
		args []string
		mod  func(*corev1.Pod)
		code int32
		want string
	}{
		{name: "bad flag", args: []string{"load", "--target", "x:1", "--rate", "fast", "--duration", "1s"}, code: 2, want: `load: --rate "fast": want a number`},
		{name: "no duration", args: []string{"load", "--target", "x:1", "--rate", "1"}, code: 2, want: "load: --duration 0s"},
		{name: "no token", args: ok, mod: func(p *corev1.Pod) { p.Spec.Containers[0].Env = nil }, code: 2, want: "$PINLAB_TOKEN is empty"},
		{name: "a target off the lab", args: append(ok[:2:2], "passthrough:///10.1.2.3:8471", "--rate", "5", "--duration", "10s"), code: 2, want: "10.1.2.3"},
		{name: "a process-wide setting", args: append(ok, "--min-resolution-interval", "5s"), code: 1, want: "--min-resolution-interval: grpc-go's least time between resolutions is process-wide"},
		{name: "command", args: []string{"--rate", "x"}, mod: func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"/pinlab", "load"} }, code: 2, want: `--rate "x": want a number`},
	}
	c, k, _ := loadNode(t, Config{RestartBackoff: time.Hour})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "bad-load-" + strconv.Itoa(i)
			mods := loadPod(tt.args...)
			createPod(t, c, name, func(p *corev1.Pod) {
				mods(p)
				if tt.mod != nil {
					tt.mod(p)
				}
			})
			p := waitPod(t, c, name, "CrashLoopBackOff", func(p *corev1.Pod, err error) bool {
				if err != nil || len(p.Status.ContainerStatuses) == 0 {
					return false
				}
				w := p.Status.ContainerStatuses[0].State.Waiting
				return w != nil && w.Reason == "CrashLoopBackOff"
			})
			last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
			if last == nil || last.ExitCode != tt.code || !strings.Contains(last.Message, tt.want) {
				t.Errorf("last state %+v, want exit %d with %q", last, tt.code, tt.want)
			}
			if cluster.IsPodReady(p) {
				t.Error("Ready in CrashLoopBackOff")
			}
			log := logText(t, k, name, false)
			if !strings.Contains(log, tt.want) || !strings.Contains(log, "exited with code "+strconv.Itoa(int(tt.code))) {
				t.Errorf("log lacks %q and the exit code %d:\n%s", tt.want, tt.code, log)
			}
			deletePod(t, c, name)
			waitGone(t, c, name)
		})
	}
}

// TestNoLoadClient: a node not given Config.LoadClient cannot start a
// load client's container, and says why.
func TestNoLoadClient(t *testing.T) {
	c, _, _ := node(t, Config{RestartBackoff: time.Hour})
	createPod(t, c, "load", func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"load", "--rate", "1"} })
	waitPod(t, c, "load", "the reason", func(p *corev1.Pod, err error) bool {
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
		return last != nil && last.ExitCode == 1 && strings.Contains(last.Message, "this node runs no load clients")
	})
}

// TestLoadContainerProbes: a load client's container is Ready once it
// started (after its startup probe, if any), as in Kubernetes, unless a
// readiness probe says otherwise; until its startup probe succeeds it is
// not Ready.
func TestLoadContainerProbes(t *testing.T) {
	tcp := func(port int32) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}}}
	}
	// A startup probe that fails kills the container, as in Kubernetes;
	// its first check may come before the client listens, so it is given
	// the failures a startup probe usually has (more than the 10 s the
	// test waits).
	startup := func(port int32) func(*corev1.Container) {
		return func(c *corev1.Container) {
			c.StartupProbe = tcp(port)
			c.StartupProbe.FailureThreshold = 30
		}
	}
	tests := []struct {
		name    string
		mod     func(*corev1.Container)
		failing string // "": the pod becomes Ready; else the probe failing, the pod not Ready and, for startup, its container not started
	}{
		{name: "none"},
		{name: "readiness on the events port", mod: func(c *corev1.Container) { c.ReadinessProbe = tcp(9480) }},
		{name: "startup on the events port", mod: startup(9480)},
		{name: "readiness on a closed port", mod: func(c *corev1.Container) { c.ReadinessProbe = tcp(9) }, failing: "readiness"},
		{name: "startup on a closed port", mod: startup(9), failing: "startup"},
	}
	started := func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].Started != nil && *cs[0].Started
	}
	c, _, _ := loadNode(t, Config{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "probed-" + strconv.Itoa(i)
			createPod(t, c, name, func(p *corev1.Pod) {
				loadPod("load", "--target", "passthrough:///127.205.0.1:1", "--rate", "1", "--duration", "1m")(p)
				if tt.mod != nil {
					tt.mod(&p.Spec.Containers[0])
				}
			})
			if tt.failing == "" {
				waitPod(t, c, name, "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
			} else {
				want := tt.failing + " probe failed"
				waitPod(t, c, name, "a "+want, func(p *corev1.Pod, err error) bool {
					return err == nil && strings.Contains(p.Status.Message, want) && !cluster.IsPodReady(p) && started(p) == (tt.failing != "startup")
				})
			}
			deletePod(t, c, name)
			waitGone(t, c, name)
		})
	}
}

// TestClusterDNS: a load client's cluster DNS is found through the API,
// as the lab publishes it.
func TestClusterDNS(t *testing.T) {
	port := func(n int32) *int32 { return &n }
	udp, ready, notReady := corev1.ProtocolUDP, true, false
	slice := func(ip string, ready *bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "kube-dns-lab", Namespace: "kube-system", Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}},
			Ports:       []discoveryv1.EndpointPort{{Name: new("dns"), Port: port(1053), Protocol: &udp}},
		}
	}
	tests := []struct {
		name    string
		dns     netip.Addr
		svcPort int32 // 0 leaves 53
		slice   *discoveryv1.EndpointSlice
		want    string
	}{
		{name: "no cluster DNS", want: ""},
		{name: "the Service's port 53", dns: netip.MustParseAddr("127.213.0.10"), want: "127.213.0.10:53"},
		{name: "the port the lab's DNS bound", dns: netip.MustParseAddr("127.213.0.10"), svcPort: 10053, want: "127.213.0.10:10053"},
		{name: "CoreDNS's endpoint", dns: netip.MustParseAddr("127.213.0.10"), slice: slice("127.213.1.2", &ready), want: "127.213.1.2:1053"},
		{name: "an endpoint not ready", dns: netip.MustParseAddr("127.213.0.10"), slice: slice("127.213.1.2", &notReady), want: "127.213.0.10:53"},
		{name: "no Service at the address", dns: netip.MustParseAddr("127.213.0.99"), want: "127.213.0.99:53"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := cluster.New(cluster.Config{Seed: 1, ServiceCIDR: loadServices, PodCIDR: netip.MustParsePrefix("127.205.250.0/24"), DNSIP: netip.MustParseAddr("127.213.0.10")})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if tt.svcPort != 0 {
				svc, err := c.Client().CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				svc.Spec.Ports[0].Port = tt.svcPort
				if _, err := c.Client().CoreV1().Services("kube-system").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.slice != nil {
				if _, err := c.Client().DiscoveryV1().EndpointSlices("kube-system").Create(ctx, tt.slice, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			k := New(c.Client(), c.Factory(), Config{PodIPs: c.PodIPs(), ClusterDNS: tt.dns})
			if got := k.clusterDNS(ctx); got != tt.want {
				t.Errorf("clusterDNS = %q, want %q", got, tt.want)
			}
		})
	}
}
